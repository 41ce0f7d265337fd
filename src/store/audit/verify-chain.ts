// Walks the whole audit chain through the Store (`admin audit verify`, `admin migrate`): the first broken entry,
// if any, and the head.

import type { Store } from '../store.js';
import { ChainVerifier } from './audit-chain.js';

export interface ChainReport {
  /** Entries verified (before the broken one, if any). */
  count: number;
  head: string;
  problem?: { seq: number; problem: string };
}

export async function verifyAuditChain(store: Store): Promise<ChainReport> {
  const verifier = new ChainVerifier();
  let after = 0;
  let head = '';
  for (;;) {
    const page = await store.audit.read(after, 1000);
    if (page.length === 0) break;
    for (const entry of page) {
      const problem = verifier.check(entry);
      if (problem) return { count: verifier.count, head, problem };
      head = entry.hash;
    }
    after = (page.at(-1) as { seq: number }).seq;
  }
  return { count: verifier.count, head };
}
