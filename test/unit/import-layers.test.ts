// Dependencies point down: every source file under src/, wire/ and daemon/ (.ts, and the .cjs/.mjs worker scripts)
// belongs to a layer, and may import only from its own layer or one below it (the table is mirrored in
// docs/architecture.md, "Layers"). A worker script loaded by path at run time (`new Worker(new URL('./x.cjs',
// import.meta.url))`, or `packagePath('src', ..., 'x.cjs')`) counts as an import of that script. Packages that belong
// to one layer (the HTTP framework, the database drivers, the key-store SDKs) are imported only there, a few folders
// never import another, and there is no import circle between files, except the few named below (each with its
// reason in docs/architecture.md). Each rule is also fed a bad import below, to show it can fail.

import { existsSync, readdirSync, readFileSync } from 'node:fs';
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

/**
 * Packages that belong to some layers only (STYLE.md: the policy and the layers below the HTTP doors know no fastify;
 * storage and key backends sit behind one interface each). A package not named here may be imported anywhere.
 */
const PACKAGE_RULES: { packages: RegExp; layers: string[]; why: string }[] = [
  {
    packages: /^(fastify|@fastify\/.+)$/,
    layers: ['web', 'api', 'app', 'daemon', 'cli'],
    why: 'the HTTP framework belongs to the doors (the console and the API) and the process that runs them',
  },
  {
    packages: /^(pg|pg-.+|kysely|better-sqlite3|better-sqlite3-node20)(\/.*)?$/,
    layers: ['store'],
    why: 'the database drivers are behind the Store contract',
  },
  {
    packages: /^(pkcs11js|graphene-pk11|@aws-sdk\/client-kms)(\/.*)?$/,
    layers: ['keys'],
    why: 'the token and KMS SDKs are behind the KeyStore contract',
  },
];

/** Files that break a package rule today, each named with its reason in docs/architecture.md ("Known debts"). */
const PACKAGE_EXCEPTIONS: { file: string; packages: string[] }[] = [
  // The browser session reads and sets its cookie on fastify's request and reply types.
  { file: 'src/auth/oidc/sessions.ts', packages: ['fastify'] },
];

/** Folders that never import another although the layers would allow it (peers in one layer). */
const FOLDER_RULES: { from: string; to: string; why: string }[] = [
  {
    from: 'src/policy/',
    to: 'src/auth/',
    why: 'the policy owns its words (workload-facts.ts, claim-pattern.ts); auth fills them in, not the other way',
  },
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

const SOURCE = /\.(ts|cjs|mjs)$/;

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) {
      if (entry.name !== 'node_modules' && entry.name !== 'build') out.push(...sourceFiles(path));
    } else if (SOURCE.test(entry.name) && !entry.name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

interface Imports {
  /** Relative imports and worker scripts, as paths from the repository root (a .js specifier names its .ts). */
  files: { specifier: string; target: string }[];
  /** Bare specifiers: packages (node: built-ins left out). */
  packages: string[];
}

/** The string literals of a call's arguments, or undefined when any argument is not one. */
function literalArguments(args: string): string[] | undefined {
  const parts = args.split(',').map((part) => part.trim());
  const values = parts.map((part) => /^'([^']*)'$|^"([^"]*)"$/.exec(part));
  if (values.some((value) => value === null)) return undefined;
  return values.map((value) => (value?.[1] ?? value?.[2]) as string);
}

/**
 * What a file imports: import and import type, export ... from, import(), require(); and the scripts it starts by
 * path, `new URL('<relative>', import.meta.url)` and `packagePath('<segment>', ...)` with literal arguments.
 */
function importsIn(file: string, text: string): Imports {
  const info = ts.preProcessFile(text, true, true);
  const fromFile = (specifier: string): string =>
    relative(root, normalize(join(root, dirname(file), specifier))).replace(/\.js$/, '.ts');
  const files = info.importedFiles
    .filter((imported) => imported.fileName.startsWith('.'))
    .map((imported) => ({ specifier: imported.fileName, target: fromFile(imported.fileName) }));
  for (const m of text.matchAll(/new URL\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*,\s*import\.meta\.url\s*\)/g)) {
    files.push({ specifier: m[0], target: fromFile(m[1] as string) });
  }
  for (const m of text.matchAll(/packagePath\(([^()]*)\)/g)) {
    const segments = literalArguments(m[1] as string);
    if (segments && SOURCE.test(segments.at(-1) ?? '')) files.push({ specifier: m[0], target: segments.join('/') });
  }
  const packages = info.importedFiles
    .map((imported) => imported.fileName)
    .filter((name) => !name.startsWith('.') && !name.startsWith('node:'));
  return { files, packages };
}

/** The package's name, without a path inside it: `@scope/name` or `name`. */
function packageName(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : (parts[0] as string);
}

function upwardImport(file: string, specifier: string, target: string): string | undefined {
  const from = layerOf(file);
  const to = layerOf(target);
  if (to <= from) return undefined;
  const [fromName, toName] = [LAYERS[from]?.name, LAYERS[to]?.name];
  return `${file} imports '${specifier}' (${target}): layer ${fromName} may not import from layer ${toName}, which sits above it`;
}

function packageBreach(file: string, specifier: string): string | undefined {
  const layer = LAYERS[layerOf(file)]?.name ?? '(none)';
  const name = packageName(specifier);
  const excepted = PACKAGE_EXCEPTIONS.some((e) => e.file === file && e.packages.includes(name));
  for (const rule of PACKAGE_RULES) {
    if (rule.packages.test(specifier) && !rule.layers.includes(layer) && !excepted) {
      return `${file} imports '${specifier}': layer ${layer} may not (only ${rule.layers.join(', ')}: ${rule.why})`;
    }
  }
  return undefined;
}

function folderBreach(file: string, specifier: string, target: string): string | undefined {
  const rule = FOLDER_RULES.find((r) => file.startsWith(r.from) && target.startsWith(r.to));
  return rule && `${file} imports '${specifier}' (${target}): ${rule.from} never imports ${rule.to} (${rule.why})`;
}

const files = [...sourceFiles('src'), ...sourceFiles('wire'), ...sourceFiles('daemon')].sort();
const known = new Set(files);
const imports = new Map(files.map((file) => [file, importsIn(file, readFileSync(join(root, file), 'utf8'))]));
const graph = new Map([...imports].map(([file, found]) => [file, found.files.filter((e) => known.has(e.target))]));

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
  it('places every file under src/, wire/ and daemon/ in a layer, worker scripts included', () => {
    expect(files).toContain('src/keys/pkcs11/pkcs11-sign-worker.cjs');
    expect(files).toContain('src/keys/software/software-sign-worker.mjs');
    expect(files.filter((file) => layerOf(file) < 0)).toEqual([]);
  });

  it('finds every worker script a file starts by path, and each exists', () => {
    const scripts = [...imports].flatMap(([file, found]) =>
      found.files.filter((e) => /\.(cjs|mjs)$/.test(e.target)).map((e) => ({ file, ...e })),
    );
    expect(scripts.map((s) => s.target)).toEqual(
      expect.arrayContaining(['src/keys/pkcs11/pkcs11-sign-worker.cjs', 'src/keys/software/software-sign-worker.mjs']),
    );
    const missing = scripts.filter((s) => !existsSync(join(root, s.target)));
    expect(missing.map((s) => `${s.file}: ${s.specifier} names ${s.target}, which does not exist`)).toEqual([]);
  });

  it('imports only from the same layer or one below', () => {
    const upward: string[] = [];
    for (const [file, edges] of graph) {
      for (const { specifier, target } of edges) {
        const breach = upwardImport(file, specifier, target);
        if (breach) upward.push(breach);
      }
    }
    expect(upward).toEqual([]);
  });

  it('imports a package only in the layers it belongs to, but the named exceptions', () => {
    const breaches: string[] = [];
    for (const [file, found] of imports) {
      for (const specifier of found.packages) {
        const breach = packageBreach(file, specifier);
        if (breach) breaches.push(breach);
      }
    }
    expect(breaches).toEqual([]);
    // An exception that no longer imports the package goes from the list.
    const stale = PACKAGE_EXCEPTIONS.filter(
      (e) => !e.packages.every((name) => imports.get(e.file)?.packages.some((p) => packageName(p) === name)),
    );
    expect(stale).toEqual([]);
  });

  it('keeps the folders apart that never import each other', () => {
    const breaches: string[] = [];
    for (const [file, edges] of graph) {
      for (const { specifier, target } of edges) {
        const breach = folderBreach(file, specifier, target);
        if (breach) breaches.push(breach);
      }
    }
    expect(breaches).toEqual([]);
  });

  it('has no import circle between files but the named ones', () => {
    const allowed = new Set(ALLOWED_CIRCLES.map((circle) => [...circle.files].sort().join(' ')));
    const unexpected = circles()
      .filter((component) => !allowed.has(component.join(' ')))
      .map((component) => `import circle: ${component.join(' <-> ')}`);
    expect(unexpected).toEqual([]);
  });
});

describe('import layers: each rule fails on a bad import', () => {
  it('reads a worker started by URL or by packagePath, and require() in a .cjs script, as imports', () => {
    const pool = importsIn(
      'src/keys/pkcs11/pool.ts',
      "const a = new Worker(new URL('./x-worker.cjs', import.meta.url));\n" +
        "const b = new Worker(packagePath('src', 'api', 'y-worker.mjs'));\n" +
        "const c = packagePath('assets', dir, 'z.cjs');\n",
    );
    expect(pool.files.map((e) => e.target)).toEqual(['src/keys/pkcs11/x-worker.cjs', 'src/api/y-worker.mjs']);
    const script = importsIn(
      'src/store/w.cjs',
      "const s = require('../signing/s.js');\nconst db = require('better-sqlite3');\n",
    );
    expect(script.files.map((e) => e.target)).toEqual(['src/signing/s.ts']);
    expect(script.packages).toEqual(['better-sqlite3']);
  });

  it('fails an upward import, one found in a worker script too', () => {
    expect(upwardImport('src/keys/key-store.ts', '../store/store.js', 'src/store/store.ts')).toMatch(
      /layer keys may not import from layer store/,
    );
    expect(upwardImport('src/keys/pool.ts', "packagePath('src', 'api', 'w.cjs')", 'src/api/w.cjs')).toMatch(
      /layer keys may not import from layer api/,
    );
    expect(upwardImport('src/api/routes/v1.ts', '../../signing/x.js', 'src/signing/x.ts')).toBeUndefined();
  });

  it('fails fastify below the web layer, a database driver outside the store, a token SDK outside the keys', () => {
    expect(packageBreach('src/policy/rules-engine.ts', 'fastify')).toMatch(/layer features may not/);
    expect(packageBreach('src/signing/signer.ts', '@fastify/swagger')).toMatch(/layer signing may not/);
    expect(packageBreach('src/auth/oidc/sessions.ts', 'fastify')).toBeUndefined(); // a named exception
    expect(packageBreach('src/auth/oidc/sessions.ts', 'kysely')).toMatch(/behind the Store contract/);
    expect(packageBreach('src/web/console.ts', 'fastify')).toBeUndefined();
    expect(packageBreach('src/signing/tenant-keys.ts', 'pg')).toMatch(/layer signing may not/);
    expect(packageBreach('src/store/sqlite-writer.cjs', 'better-sqlite3')).toBeUndefined();
    expect(packageBreach('src/cli/admin.ts', 'pkcs11js')).toMatch(/behind the KeyStore contract/);
    expect(packageBreach('src/keys/aws-kms/aws-kms-key-store.ts', '@aws-sdk/client-kms')).toBeUndefined();
  });

  it('fails policy importing auth', () => {
    expect(folderBreach('src/policy/rules-engine.ts', '../auth/workload/x.js', 'src/auth/workload/x.ts')).toMatch(
      /src\/policy\/ never imports src\/auth\//,
    );
    expect(
      folderBreach('src/auth/workload/trust-rule.ts', '../../policy/claim-pattern.js', 'src/policy/claim-pattern.ts'),
    ).toBeUndefined();
  });
});
