// The load most benches put on the service: autocannon POSTing one P-256 `sign` request (the same digest each
// time) with `connections` connections for `duration` seconds.
import autocannon, { type Result } from 'autocannon';

export interface SignLoad {
  /** The service's base URL. */
  url: string;
  /** A signer API key of `tenantId`. */
  signer: string;
  tenantId: string;
  connections: number;
  /** Seconds. */
  duration: number;
  /** The digest's byte (every byte of it), so that benches running side by side sign different digests. */
  fill?: number;
}

export function signLoad(load: SignLoad): Promise<Result> {
  return autocannon({
    url: `${load.url}/v1/sign`,
    method: 'POST',
    headers: { authorization: `Bearer ${load.signer}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      action: 'sign',
      tenant_id: load.tenantId,
      algorithm: 'ECDSA_SHA_256',
      hash: Buffer.alloc(32, load.fill ?? 7).toString('base64'),
    }),
    connections: load.connections,
    duration: load.duration,
  });
}
