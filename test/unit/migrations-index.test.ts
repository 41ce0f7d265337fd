// The migrations index (src/store/migrations.ts) lists every migration file under src/store/migrations/, by the
// file's name, in name order (the order Kysely runs them in), each number once: a new migration's file that is not
// listed would never run.
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MIGRATIONS } from '../../src/store/migrations.js';

const dir = join(import.meta.dirname, '..', '..', 'src', 'store', 'migrations');
/** Files in the folder that are not migrations: what several migrations share. */
const HELPERS = ['column-types.ts'];
const MIGRATION_FILE = /^(\d{4})_[a-z0-9_]+\.ts$/;

const files = readdirSync(dir).filter((f) => !HELPERS.includes(f));
const names = Object.keys(MIGRATIONS);

describe('migrations index', () => {
  it('names every file in the folder a migration or a known helper', () => {
    expect(files.filter((f) => !MIGRATION_FILE.test(f))).toEqual([]);
  });

  it('lists each migration file under its name, and nothing else', () => {
    expect([...names].sort()).toEqual(files.map((f) => f.replace(/\.ts$/, '')).sort());
  });

  it('lists them in name order, each number once', () => {
    expect(names).toEqual([...names].sort());
    const numbers = names.map((n) => n.slice(0, 4));
    expect(new Set(numbers).size).toBe(numbers.length);
  });

  it('takes each migration from the file of its name', async () => {
    for (const name of names) {
      const exported = Object.values(await import(join(dir, `${name}.ts`)));
      expect(exported, name).toEqual([MIGRATIONS[name]]);
      expect(exported[0], name).toBe(MIGRATIONS[name]);
    }
  });
});
