// The signing service's audit entries, stamped by the service's clock.

import type { EventInput } from '../store/records/event-kinds.js';
import type { Store } from '../store/store.js';

export type Audit = (
  tenantId: string | null,
  actor: string,
  action: string,
  outcome: string,
  details: Record<string, unknown>,
  events?: readonly EventInput[],
) => Promise<void>;

/** Appends to the audit log; a failed write fails the caller's request. */
export function auditTo(store: Store, now: () => Date): Audit {
  return (tenantId, actor, action, outcome, details, events) =>
    store.audit.append({ at: now().toISOString(), tenantId, actor, action, outcome, details }, events);
}
