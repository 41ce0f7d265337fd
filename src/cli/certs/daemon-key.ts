// A RemoteKey reached through the build-host daemon, the way the PKCS#11 module reaches it (HELLO, LIST, SIGN,
// POLL): `signbridge cert` needs no credentials of its own, and its signatures pass the same policy as any other.
import { createHash } from 'node:crypto';
import { DaemonClient } from '../../../wire/client.js';
import type { Response, SignContext, WireKey } from '../../../wire/messages.js';
import { wireStatusName } from '../../../wire/wire.js';
import { algorithmInfo, KEY_SPECS, type KeySpec } from '../../crypto/algorithms.js';
import type { RemoteKey } from './x509-builder.js';

export class DaemonKeyError extends Error {}

export interface DaemonKeyOptions {
  /** Called once when a signature waits for an approval, and again while it keeps waiting. */
  onPending?: (requestId: string, status: string, message: string) => void;
  /** How long to wait for an approval before giving up (default 10 minutes). */
  approvalTimeoutMs?: number;
  /** Policy inputs sent with each signature (by default from the environment, as the module does). */
  context?: SignContext;
}

/** The build step's context from the variables the module reads too (SIGNBRIDGE_PROJECT, ...). */
export function contextFromEnv(env: NodeJS.ProcessEnv = process.env): SignContext {
  const ctx: SignContext = {};
  if (env.SIGNBRIDGE_PROJECT) ctx.project = env.SIGNBRIDGE_PROJECT;
  if (env.SIGNBRIDGE_ENVIRONMENT) ctx.environment = env.SIGNBRIDGE_ENVIRONMENT;
  if (env.SIGNBRIDGE_ARTIFACT_TYPE) ctx.artifactType = env.SIGNBRIDGE_ARTIFACT_TYPE;
  if (env.SIGNBRIDGE_ARTIFACT_VERSION) ctx.artifactVersion = env.SIGNBRIDGE_ARTIFACT_VERSION;
  return ctx;
}

export interface DaemonKey extends RemoteKey {
  tenant: string;
  /** The service key id (the key's CKA_LABEL). */
  keyId: string;
  /** CKA_ID. */
  ckaId: Buffer;
  close(): void;
}

export function describeWireError(res: Response): string {
  if (res.type !== 'ERROR') return `unexpected answer ${res.type} from the daemon`;
  return `${wireStatusName(res.status)}: ${res.message}${res.requestId ? ` (request ${res.requestId})` : ''}`;
}

/** Connects to the daemon and says HELLO; a daemon that is not running is a clear error. */
export async function connectDaemon(socketPath: string, client: string): Promise<DaemonClient> {
  let opened: Awaited<ReturnType<typeof DaemonClient.open>>;
  try {
    opened = await DaemonClient.open(socketPath, client);
  } catch (err) {
    throw new DaemonKeyError(
      `cannot reach the signbridge daemon at ${socketPath} (${(err as Error).message}); ` +
        'start it with `signbridge daemon`, or pass --socket / set SIGNBRIDGE_SOCKET',
    );
  }
  if (opened.hello.type !== 'HELLO_OK') {
    opened.client.close();
    throw new DaemonKeyError(`the daemon refused the connection: ${describeWireError(opened.hello)}`);
  }
  return opened.client;
}

/** The tenant's current key as the daemon shows it to the module. */
export async function openDaemonKey(
  socketPath: string,
  tenant: string,
  options: DaemonKeyOptions = {},
): Promise<DaemonKey> {
  const client = await connectDaemon(socketPath, 'signbridge cert');
  try {
    const list = await client.request({ type: 'LIST' });
    if (list.type !== 'LIST_OK') throw new DaemonKeyError(`listing keys failed: ${describeWireError(list)}`);
    const token = list.tokens.find((t) => t.tenant === tenant);
    if (!token) {
      const served = list.tokens.map((t) => t.tenant).join(', ') || 'none';
      throw new DaemonKeyError(`the daemon does not expose tenant ${tenant} (it exposes: ${served})`);
    }
    const key = token.keys[0] as WireKey | undefined;
    if (!key) {
      // The daemon says why when it knows (the tenant failed, or its key is one PKCS#11 cannot use, e.g. SM2).
      throw new DaemonKeyError(
        token.message
          ? `tenant ${tenant} shows no key: ${token.message}`
          : `tenant ${tenant} shows no key: it does not exist in the service, or the daemon's API key may not use it`,
      );
    }
    if (!(KEY_SPECS as readonly string[]).includes(key.keySpec)) {
      throw new DaemonKeyError(`tenant ${tenant}'s key has a key spec this tool does not know: ${key.keySpec}`);
    }
    const sign: RemoteKey['sign'] = async (algorithm, input) => {
      const context = options.context ?? contextFromEnv();
      // Pure Ed25519: the message travels as DATA with its SHA-512 as DIGEST (wire protocol version 2).
      const pure = algorithmInfo(algorithm).hash === 'message';
      const digest = pure ? createHash('sha512').update(input).digest() : input;
      const signed = { type: 'SIGN' as const, tenant, keyId: key.keyId, algorithm, digest, ...context };
      let res = await client.request(pure ? { ...signed, data: input } : signed);
      const deadline = Date.now() + (options.approvalTimeoutMs ?? 600_000);
      while (res.type === 'SIGN_PENDING') {
        options.onPending?.(res.requestId, res.status, res.message);
        if (Date.now() > deadline) {
          throw new DaemonKeyError(
            `request ${res.requestId} is still ${res.status}; run the command again after it is approved`,
          );
        }
        // The daemon holds a POLL open for a while itself, so this loop does not spin.
        res = await client.request({ type: 'POLL', tenant, requestId: res.requestId, digest });
      }
      if (res.type !== 'SIGN_OK') throw new DaemonKeyError(`signing failed: ${describeWireError(res)}`);
      return res.signature;
    };
    return {
      tenant,
      keyId: key.label,
      ckaId: key.keyId,
      keySpec: key.keySpec as KeySpec,
      spki: key.publicKey,
      sign,
      close: () => client.close(),
    };
  } catch (err) {
    client.close();
    throw err;
  }
}
