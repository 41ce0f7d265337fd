// Bundles the build-host client (src/cli/client-main.ts) into one ES module with esbuild, so that the client
// packages carry no node_modules. Fails when the bundle reaches the service's modules: the client must not load
// fastify, SQLite, PostgreSQL or the key stores (and must not need their native addons).
//   node packaging/client/bundle.mjs OUTFILE
import { writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const outfile = process.argv[2];
if (!outfile) throw new Error('usage: node packaging/client/bundle.mjs OUTFILE');

// Inputs the client must never contain: the service's packages (and their native addons), and the files that
// open its database, its key stores or its HTTP server. Shared leaves (schemas, key-import rules) may come along.
const FORBIDDEN = [
  /node_modules\/(better-sqlite3|pkcs11js|graphene-pk11|fastify|@fastify\/[^/]+|pg|pg-[^/]+|kysely|@aws-sdk\/[^/]+|prom-client|oidc-provider|openid-client)\//,
  /^src\/(app|server)\.ts$/,
  /^src\/store\/(sqlite|postgres)\//,
  /^src\/store\/kysely-store\.ts$/,
  /^src\/keys\/(pkcs11|aws-kms|software)\//,
  /^daemon\/upstream\/in-process-upstream\.ts$/,
];

/** The daemon's in-process mode (a dynamic import in daemon/daemon.ts) resolves to a stand-in that explains. */
const noInProcess = {
  name: 'no-in-process-upstream',
  setup(b) {
    b.onResolve({ filter: /in-process-upstream\.js$/ }, () => ({
      path: join(root, 'packaging', 'client', 'no-in-process-upstream.ts'),
    }));
  },
};

const result = await build({
  absWorkingDir: root,
  entryPoints: [join(root, 'packaging', 'client', 'entry.ts')],
  outfile,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  // Bundled CommonJS packages call require() for Node's built-ins; an ES module has no require of its own.
  banner: {
    js: "#!/usr/bin/env node\nimport { createRequire as __sbCreateRequire } from 'node:module';\nconst require = __sbCreateRequire(import.meta.url);",
  },
  legalComments: 'external',
  metafile: true,
  plugins: [noInProcess],
  logLevel: 'warning',
});

const inputs = Object.keys(result.metafile.inputs).map((p) => relative(root, join(root, p)));
const bad = inputs.filter((p) => FORBIDDEN.some((re) => re.test(p)));
if (bad.length > 0) {
  throw new Error(`the client bundle reaches the service's modules:\n  ${bad.join('\n  ')}`);
}
writeFileSync(`${outfile}.inputs.txt`, `${inputs.sort().join('\n')}\n`);
process.stderr.write(`[package] bundled ${inputs.length} files into ${relative(root, outfile)}\n`);
