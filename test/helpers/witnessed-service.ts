// The real service (SQLite, SoftHSM, its integrator at the defaults) with log.witnesses naming witnesses written from
// the C2SP specs (tlog-witness.ts), one P-256 tenant with a signer key, and the service's warnings kept: what the
// witness tests (test/transparency/*witness*) each start the same way.

import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { LOG_DEFAULTS } from '../../src/transparency/log-service.js';
import { witnessSettings } from '../../src/transparency/witnesses/witness-settings.js';
import { logGet } from './log-client.js';
import { callAction, startTestService, type TestService } from './service.js';
import { TestWitness } from './tlog-witness.js';
import { waitFor } from './wait.js';

const ed25519Witness = () => new TestWitness({ name: 'witness.test/ed25519', kind: 'ed25519' });
const mlDsaWitness = () => new TestWitness({ name: 'witness.test/ml-dsa-44', kind: 'ml-dsa-44' });
/** It cosigned a tree of one entry with another root: the real log is a fork to it (every proof fails, 422). */
export const forkedWitness = () =>
  new TestWitness({ name: 'witness.test/forked', kind: 'ed25519', seed: { size: 1, root: randomBytes(32) } });

/** Two honest cosigners (Ed25519, ML-DSA-44) and the forked one, and the three as one list. */
export function honestAndForkedWitnesses() {
  const ed = ed25519Witness();
  const pq = mlDsaWitness();
  const forked = forkedWitness();
  return { ed, pq, forked, all: [ed, pq, forked] };
}

export interface WitnessedService {
  svc: TestService;
  /** The service's address when it was asked to listen (the CLI's --service-url), else ''. */
  url: string;
  /** The log's verifier key (`/log/public-key`). */
  vkey: string;
  /** A signer key of the tenant. */
  signer: string;
  /** Every warning the service logged, in order. */
  warnings: string[];
  /** Closes the service, then stops the witnesses. */
  close(): Promise<void>;
}

export async function startWitnessedService(
  tenant: string,
  witnesses: TestWitness[],
  opts: {
    listen?: boolean;
    /**
     * When the witnesses learn the log's key: `at-once`, or `after-404` (each first answers a checkpoint 404, an
     * unknown log, as a real one would; waited for, so that the retry after a 404 is tested whatever the machine's
     * speed: trusting at once let the first checkpoint arrive after the trust on one CI run).
     */
    trust: 'at-once' | 'after-404';
    /**
     * Witnesses that trust the log's Ed25519 key (`/log/public-key?type=ed25519`), as a witness of the public network
     * would (it verifies no ECDSA); the others trust the ECDSA key. Each is sent the whole checkpoint, both lines.
     */
    ed25519?: TestWitness[];
  },
): Promise<WitnessedService> {
  const stopWitnesses = async () => {
    for (const w of witnesses) await w.stop();
  };
  let svc: TestService | undefined;
  try {
    for (const w of witnesses) await w.start();
    svc = await startTestService({
      log: { ...LOG_DEFAULTS, witnesses: witnessSettings(witnesses.map((w) => ({ url: w.url, key: w.vkey }))) },
    });
    const started = svc;
    const warnings: string[] = [];
    started.app.log.warn = ((msg: unknown, text?: string) => {
      warnings.push(typeof msg === 'string' ? msg : String(text));
    }) as typeof started.app.log.warn;
    let url = '';
    if (opts.listen) {
      await started.app.listen({ port: 0, host: '127.0.0.1' });
      url = `http://127.0.0.1:${(started.app.server.address() as AddressInfo).port}`;
    }
    await callAction(started.app, started.operator, 'create_tenant', { tenant_id: tenant, key_spec: 'ECC_NIST_P256' });
    const signer = await started.apiKey('signer', tenant);
    const vkey = (await logGet(started.app, '/log/public-key', signer)).text.trim();
    if (opts.trust === 'after-404') {
      await waitFor('a checkpoint sent to every witness before it trusts the log', () =>
        witnesses.every((w) => w.statuses.length > 0),
      );
    }
    const edVkey = opts.ed25519?.length
      ? (await logGet(started.app, '/log/public-key?type=ed25519', signer)).text.trim()
      : undefined;
    for (const w of witnesses) w.trust(edVkey !== undefined && opts.ed25519?.includes(w) ? edVkey : vkey);
    return {
      svc: started,
      url,
      vkey,
      signer,
      warnings,
      close: async () => {
        await started.close();
        await stopWitnesses();
      },
    };
  } catch (error) {
    // Nothing is left running when the set-up fails half-way (the caller gets no close).
    await svc?.close();
    await stopWitnesses();
    throw error;
  }
}
