// Dependencies point down: every .ts file under src/ and daemon/ belongs to a layer, and may import only from its own
// layer or one below it (the table is mirrored in docs/architecture.md, "Layers"). And no import circle between
// files, except the few named below (each with its reason in docs/architecture.md).

import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');

/** Lowest first. A file may import from its own layer and from any layer listed before it. */
const LAYERS: { name: string; paths: string[] }[] = [
  {
    name: 'base',
    paths: [
      'src/errors.ts',
      'src/config-error.ts',
      'src/paths.ts',
      'src/fs-private.ts',
      'src/busy-poll.ts',
      'src/crypto/',
      'src/net/',
    ],
  },
  { name: 'wire', paths: ['wire/'] },
  { name: 'keys', paths: ['src/keys/'] },
  { name: 'store', paths: ['src/store/'] },
  {
    name: 'features',
    paths: [
      'src/auth/',
      'src/kms-api/',
      'src/events/',
      'src/metrics/',
      'src/policy/',
      'src/retention/',
      'src/transparency/',
      'src/trial/',
      'src/tsa/',
    ],
  },
  { name: 'config', paths: ['src/config/'] },
  { name: 'signing', paths: ['src/signing/'] },
  { name: 'web', paths: ['src/web/'] },
  { name: 'api', paths: ['src/api/'] },
  { name: 'app', paths: ['src/app.ts', 'src/open-stores.ts', 'src/server.ts', 'src/start-timing.ts', 'src/workers/'] },
  { name: 'daemon', paths: ['daemon/'] },
  { name: 'cli', paths: ['src/cli/'] },
];

/** Import circles between files that stay, each named with its reason in docs/architecture.md. */
const ALLOWED_CIRCLES: { name: string; files: string[] }[] = [];

function layerOf(file: string): number {
  let best = -1;
  let bestLength = -1;
  LAYERS.forEach((layer, index) => {
    for (const path of layer.paths) {
      const matches = path.endsWith('/') ? file.startsWith(path) : file === path;
      if (matches && path.length > bestLength) {
        best = index;
        bestLength = path.length;
      }
    }
  });
  return best;
}

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) out.push(...sourceFiles(path));
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

/** Every relative import of a file: import and import type, export ... from, import(), require(). */
function importsOf(file: string): { specifier: string; target: string }[] {
  const info = ts.preProcessFile(readFileSync(join(root, file), 'utf8'), true, true);
  return info.importedFiles
    .filter((imported) => imported.fileName.startsWith('.'))
    .map((imported) => ({
      specifier: imported.fileName,
      target: relative(root, normalize(join(root, dirname(file), imported.fileName))).replace(/\.js$/, '.ts'),
    }));
}

const files = [...sourceFiles('src'), ...sourceFiles('wire'), ...sourceFiles('daemon')].sort();
const known = new Set(files);
const graph = new Map(files.map((file) => [file, importsOf(file).filter((edge) => known.has(edge.target))]));

/** Strongly connected components of more than one file (Tarjan). */
function circles(): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (file: string): void => {
    index.set(file, next);
    low.set(file, next);
    next++;
    stack.push(file);
    onStack.add(file);
    for (const { target } of graph.get(file) ?? []) {
      if (!index.has(target)) {
        visit(target);
        low.set(file, Math.min(low.get(file) as number, low.get(target) as number));
      } else if (onStack.has(target)) {
        low.set(file, Math.min(low.get(file) as number, index.get(target) as number));
      }
    }
    if (low.get(file) === index.get(file)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop() as string;
        onStack.delete(member);
        component.push(member);
      } while (member !== file);
      if (component.length > 1) found.push(component.sort());
    }
  };
  for (const file of files) if (!index.has(file)) visit(file);
  return found;
}

describe('import layers', () => {
  it('places every file under src/ and daemon/ in a layer', () => {
    expect(files.filter((file) => layerOf(file) < 0)).toEqual([]);
  });

  it('imports only from the same layer or one below', () => {
    const upward: string[] = [];
    for (const [file, edges] of graph) {
      const from = layerOf(file);
      for (const { specifier, target } of edges) {
        const to = layerOf(target);
        if (to > from) {
          upward.push(
            `${file} imports '${specifier}' (${target}): layer ${LAYERS[from]?.name} may not import from layer ${LAYERS[to]?.name}, which sits above it`,
          );
        }
      }
    }
    expect(upward).toEqual([]);
  });

  it('has no import circle between files but the named ones', () => {
    const allowed = new Set(ALLOWED_CIRCLES.map((circle) => [...circle.files].sort().join(' ')));
    const unexpected = circles()
      .filter((component) => !allowed.has(component.join(' ')))
      .map((component) => `import circle: ${component.join(' <-> ')}`);
    expect(unexpected).toEqual([]);
  });
});
