#!/usr/bin/env node
// Thin launcher: the CLI is written in TypeScript and compiled to dist/ by `npm run build`.
import { main } from '../dist/src/cli/main.js';

main(process.argv).catch((err) => {
  process.stderr.write(`signbridge: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
