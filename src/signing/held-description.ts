// One description of a request held for a person's decision, for every door to word in its own protocol: the /v1
// 202 body (approve_url), KMS's KMSInvalidStateException message, Vault's held error. It names what the request
// waits for and the console page where a person decides it (src/web/request-pages.ts serves that page and takes
// its anchor from here), so that the doors below the console never import the console for a string.
import type { Pending } from './sign-outcome.js';

/** The anchor of a request on the console's requests page. */
export function requestAnchor(requestId: string): string {
  return `req-${requestId}`;
}

/**
 * The console page where a person decides request `requestId`, under the service's public URL: a signing client
 * that waits for the decision shows it (the 202's approve_url; the module's notice line).
 */
export function consolePageFor(publicUrl: string, requestId: string): string {
  return `${publicUrl.replace(/\/+$/, '')}/console/requests#${requestAnchor(encodeURIComponent(requestId))}`;
}

export interface HeldDescription {
  requestId: string;
  status: Pending['status'];
  /** The held request's own message (held-requests.ts). */
  message: string;
  /** What decides it: a security review for pending_security_review, else an approval. */
  awaits: 'approval' | 'a security review';
  /** The console page that decides it; undefined when the service knows no public URL. */
  consolePage: string | undefined;
}

export function describeHeld(pending: Pending, publicUrl: string | undefined): HeldDescription {
  return {
    requestId: pending.requestId,
    status: pending.status,
    message: pending.message,
    awaits: pending.status === 'pending_security_review' ? 'a security review' : 'approval',
    consolePage: publicUrl === undefined || publicUrl === '' ? undefined : consolePageFor(publicUrl, pending.requestId),
  };
}
