// The store's shape (docs/architecture.md, "The stores"): every part is built one way, from a context (a StorePart
// from the store's StoreContext, every other part from a PartContext of the tables it declares, part-context.ts);
// no part casts one set of tables to another (the one cast between table sets is narrowTables, and the others left
// are the drivers' boundaries, each named below); and the parts, which both dialects share, import neither
// dialect's store.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');
const storeDir = join(root, 'src', 'store');

/** Folders of src/store/ that are not parts shared by both dialects. */
const NOT_PARTS = new Set(['sqlite', 'postgres', 'records', 'migrations']);

/** The casts that stay, each at a boundary: the view of a slice of the tables, the drivers, a newer ES library. */
const CASTS_ALLOWED: Record<string, number> = {
  'src/store/part-context.ts': 1,
  'src/store/sqlite/sqlite-store.ts': 2,
  'src/store/postgres/postgres-store.ts': 2,
  'src/store/sqlite/checkpointer-thread.ts': 1,
};

function tsFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...tsFiles(path));
    else if (entry.name.endsWith('.ts')) out.push(path);
  }
  return out;
}

const files = tsFiles(storeDir).filter((f) => !relative(storeDir, f).startsWith('migrations/'));
const rel = (file: string) => relative(root, file);
/** The files of the parts: in a folder of src/store/ by concern. */
const partFiles = files.filter((f) => {
  const folder = relative(storeDir, f).split('/')[0] ?? '';
  return relative(storeDir, f).includes('/') && !NOT_PARTS.has(folder);
});

function parse(file: string): ts.SourceFile {
  return ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
}

/** The classes named *Store of a file, and how each is built: the StorePart base, or its constructor's first type. */
function partClasses(file: string): { name: string; builtFrom: string }[] {
  const out: { name: string; builtFrom: string }[] = [];
  for (const statement of parse(file).statements) {
    if (!ts.isClassDeclaration(statement) || !statement.name?.text.endsWith('Store')) continue;
    const base = statement.heritageClauses?.find((c) => c.token === ts.SyntaxKind.ExtendsKeyword)?.types[0];
    const ctor = statement.members.find(ts.isConstructorDeclaration);
    const first = ctor?.parameters[0]?.type?.getText();
    out.push({ name: statement.name.text, builtFrom: first ?? `extends ${base?.expression.getText() ?? 'nothing'}` });
  }
  return out;
}

describe('the store parts', () => {
  it('finds the parts in their folders', () => {
    const names = partFiles.flatMap(partClasses).map((c) => c.name);
    expect(names).toEqual(expect.arrayContaining(['TenantStore', 'PeopleStore', 'EventStore', 'LogStore', 'TsaStore']));
  });

  it('builds every part from a context', () => {
    const built = partFiles.flatMap((file) => partClasses(file).map((c) => ({ file: rel(file), ...c })));
    const otherwise = built.filter(
      (c) => !['extends StorePart', 'StoreContext'].includes(c.builtFrom) && !/^PartContext<\w+>$/.test(c.builtFrom),
    );
    expect(otherwise).toEqual([]);
  });

  it('casts only at the boundaries named here', () => {
    const casts: Record<string, number> = {};
    for (const file of files) {
      const n = readFileSync(file, 'utf8').match(/\bas unknown as\b/g)?.length ?? 0;
      if (n > 0) casts[rel(file)] = n;
    }
    expect(casts).toEqual(CASTS_ALLOWED);
  });

  it('keeps the dialects apart: no shared part imports a dialect store', () => {
    const crossing: string[] = [];
    for (const file of partFiles) {
      for (const statement of parse(file).statements) {
        if (!ts.isImportDeclaration(statement) && !ts.isExportDeclaration(statement)) continue;
        const spec = statement.moduleSpecifier;
        if (spec && ts.isStringLiteral(spec) && /\/(sqlite|postgres)\/\w[\w-]*-store\.js$/.test(spec.text)) {
          crossing.push(`${rel(file)} -> ${spec.text}`);
        }
      }
    }
    expect(crossing).toEqual([]);
  });
});
