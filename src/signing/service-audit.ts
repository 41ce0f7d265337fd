// The signing service's audit entries, stamped by the service's clock.

import type { AuditAction, AuditOutcome } from '../store/records/audit-vocabulary.js';
import type { EventInput } from '../store/records/event-kinds.js';
import type { Store } from '../store/store.js';

/** Appends an entry of `action`, with an outcome that action has (the audit vocabulary). */
export type Audit = <A extends AuditAction>(
  tenantId: string | null,
  actor: string,
  action: A,
  outcome: AuditOutcome<A>,
  details: Record<string, unknown>,
  events?: readonly EventInput[],
) => Promise<void>;

/** Appends to the audit log; a failed write fails the caller's request. */
export function auditTo(store: Store, now: () => Date): Audit {
  return (tenantId, actor, action, outcome, details, events) =>
    store.audit.append({ at: now().toISOString(), tenantId, actor, action, outcome, details }, events);
}
