#!/usr/bin/env node
// Thin launcher: the CLI is written in TypeScript and compiled to dist/ by `npm run build`.
import module from 'node:module';

// Node 22.1+ keeps compiled code in a cache (under the temporary folder, or NODE_COMPILE_CACHE) for the next start;
// a cache it cannot write is skipped silently. Node 20 has no such cache.
module.enableCompileCache?.();
const { main } = await import('../dist/src/cli/main.js');

main(process.argv).catch((err) => {
  process.stderr.write(`signbridge: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
