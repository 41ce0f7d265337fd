// The two calls a signed-in build host makes with its own key: who am I (`signbridge status`) and revoke
// (`signbridge logout`). Each answer is sorted into what the command tells the user.
import { callService, describeAnswer } from './service-http.js';

export interface WhoAmI {
  tenantId: string;
  roles: string[];
  expiresAt: string | null;
  email: string | null;
  kind: string;
}

export type WhoAmIResult =
  | { kind: 'ok'; who: WhoAmI }
  /** The service answered and does not accept the key (expired, revoked, person disabled). */
  | { kind: 'refused'; why: string }
  /** No usable answer: fall back to what login.json says. */
  | { kind: 'unknown'; why: string };

export async function whoAmI(base: URL, apiKey: string, timeoutMs = 5000): Promise<WhoAmIResult> {
  const answer = await callService(new URL('oauth/whoami', base), { method: 'GET', apiKey, timeoutMs });
  if (answer.kind === 'json' && answer.status === 200 && typeof answer.body.tenant_id === 'string') {
    const b = answer.body;
    return {
      kind: 'ok',
      who: {
        tenantId: b.tenant_id as string,
        roles: Array.isArray(b.roles) ? b.roles.filter((r): r is string => typeof r === 'string') : [],
        expiresAt: typeof b.expires_at === 'string' ? b.expires_at : null,
        email: typeof b.email === 'string' ? b.email : null,
        kind: typeof b.kind === 'string' ? b.kind : 'person',
      },
    };
  }
  if (answer.kind === 'json' && answer.status === 401) return { kind: 'refused', why: describeAnswer(answer) };
  return { kind: 'unknown', why: describeAnswer(answer) };
}

export type RevokeResult =
  | { kind: 'revoked' }
  /** 401: the service already does not accept the key (expired or revoked before). */
  | { kind: 'not-valid'; why: string }
  | { kind: 'failed'; why: string };

export async function revokeKey(base: URL, apiKey: string, timeoutMs = 15_000): Promise<RevokeResult> {
  const answer = await callService(new URL('oauth/revoke', base), { method: 'POST', apiKey, timeoutMs });
  if (answer.kind === 'json' && answer.status === 200 && answer.body.revoked === true) return { kind: 'revoked' };
  if (answer.kind === 'json' && answer.status === 401) return { kind: 'not-valid', why: describeAnswer(answer) };
  return { kind: 'failed', why: describeAnswer(answer) };
}
