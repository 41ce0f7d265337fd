// Proofs kept beside signatures (a tenant's `logProofs` directory, docs/daemon.md): after the module got a signature,
// the daemon fetches the inclusion proof of its `signed` entry in the service's transparency log (GET
// /log/proof/inclusion?index=<Signbridge-Log-Index>) once a checkpoint holds it, about a second later, and writes it
// as a C2SP tlog-proof file named by the SHA-256 of the signature bytes the module returned (what the signing tool
// holds: raw r||s for ECDSA). Off the signing path: C_Sign never waits for it. A proof whose entry does not name this
// signature is not written; one that never comes is logged. The folders are made at start (prepareLogProofDirs): a
// missing one used to drop every proof with a warning per signature, and the daemon said nothing when it started.
import { createHash } from 'node:crypto';
import { accessSync, chmodSync, constants, mkdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { parseInclusionBundle } from '../src/transparency/verify/inclusion-bundle.js';
import { bundleToTlogProof, encodeTlogProof } from '../src/transparency/verify/tlog-proof.js';
import type { Upstream } from './upstream/upstream.js';

/** How long the daemon keeps asking for a proof (a checkpoint comes within ~1.25 s with the service's defaults). */
const GIVE_UP_MS = 60_000;
const FIRST_WAIT_MS = 500;
const MAX_WAIT_MS = 8_000;

/**
 * Makes each tenant's `logProofs` folder that does not exist yet (0700: the daemon's user's alone), and refuses to
 * start, naming the folder, when one cannot be made or written (its parent is a file, no permission): a daemon that
 * starts anyway would drop every proof. A folder that exists is left as its owner set it.
 */
export function prepareLogProofDirs(
  tenants: readonly { tenantId: string; logProofs?: string }[],
  log: Pick<Logger, 'info'>,
): void {
  for (const { tenantId, logProofs: dir } of tenants) {
    if (dir === undefined) continue;
    try {
      const made = mkdirSync(dir, { recursive: true, mode: 0o700 });
      if (!statSync(dir).isDirectory()) throw new Error('it is not a folder');
      accessSync(dir, constants.W_OK | constants.X_OK);
      if (made !== undefined) {
        chmodSync(dir, 0o700); // whatever the umask
        log.info({ tenant: tenantId, folder: dir }, 'made the logProofs folder');
      }
    } catch (err) {
      throw new Error(
        `cannot use the logProofs folder ${dir} of tenant ${tenantId}: ${(err as Error).message} (docs/daemon.md)`,
      );
    }
  }
}

export interface LogProofKeeperOptions {
  upstream: Pick<Upstream, 'inclusionProof'>;
  /** The tenant's directory for proofs, if it keeps them. */
  dirFor(tenantId: string): string | undefined;
  log: Pick<Logger, 'warn' | 'info'>;
}

export class LogProofKeeper {
  private readonly inFlight = new Set<Promise<void>>();
  /** Cuts short the waits between asks (stop()). */
  private readonly wakers = new Set<() => void>();
  private stopping = false;

  constructor(private readonly opts: LogProofKeeperOptions) {}

  /**
   * Keeps the proof of entry `logIndex` for a signature: `serviceSignature` as the service returned it (the entry
   * names its SHA-256), `moduleSignature` as handed to the module (the file is named by its SHA-256).
   */
  keep(tenantId: string, logIndex: number | undefined, serviceSignature: Buffer, moduleSignature: Buffer): void {
    const dir = this.opts.dirFor(tenantId);
    if (dir === undefined || logIndex === undefined || !this.opts.upstream.inclusionProof) return;
    const done = this.fetchAndWrite(tenantId, dir, logIndex, serviceSignature, moduleSignature)
      .catch((err: Error) => this.opts.log.warn({ tenant: tenantId, logIndex, err: err.message }, 'log proof not kept'))
      .finally(() => this.inFlight.delete(done));
    this.inFlight.add(done);
  }

  /**
   * The daemon's shutdown: each proof still awaited is asked for once more at once, and one not logged yet is given
   * up with a line that says how to fetch it later, rather than holding the shutdown for up to GIVE_UP_MS.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    for (const wake of this.wakers) wake();
    await Promise.all([...this.inFlight]);
  }

  private async fetchAndWrite(
    tenantId: string,
    dir: string,
    logIndex: number,
    serviceSignature: Buffer,
    moduleSignature: Buffer,
  ): Promise<void> {
    const fetch = this.opts.upstream.inclusionProof as NonNullable<Upstream['inclusionProof']>;
    const giveUpAt = Date.now() + GIVE_UP_MS;
    let wait = FIRST_WAIT_MS;
    for (;;) {
      await this.sleep(wait);
      const answer = await fetch.call(this.opts.upstream, tenantId, logIndex).catch(() => 'not-yet' as const);
      if (answer !== 'not-yet') {
        const bundle = parseInclusionBundle(answer);
        const entry = bundle.entry && JSON.parse(Buffer.from(bundle.entry, 'base64').toString('utf8'));
        const named = (entry?.details as { signature_sha256?: string } | undefined)?.signature_sha256;
        if (named !== createHash('sha256').update(serviceSignature).digest('hex')) {
          throw new Error(`the entry at log index ${logIndex} does not name this signature`);
        }
        const name = `${createHash('sha256').update(moduleSignature).digest('hex')}.tlog-proof`;
        const path = join(dir, name);
        // Written whole or not at all: a reader never sees half a proof.
        writeFileSync(`${path}.tmp`, encodeTlogProof(bundleToTlogProof(bundle)), { mode: 0o644 });
        renameSync(`${path}.tmp`, path);
        this.opts.log.info({ tenant: tenantId, logIndex, file: path }, 'log proof kept');
        return;
      }
      if (this.stopping) {
        throw new Error(`the daemon stopped before a checkpoint held it (signbridge audit prove --index ${logIndex})`);
      }
      if (Date.now() + wait > giveUpAt) throw new Error(`no checkpoint held it within ${GIVE_UP_MS / 1000} s`);
      wait = Math.min(wait * 2, MAX_WAIT_MS);
    }
  }

  /** Waits `ms`, or less once stop() was called. */
  private sleep(ms: number): Promise<void> {
    if (this.stopping) return Promise.resolve();
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.wakers.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.wakers.add(wake);
    });
  }
}
