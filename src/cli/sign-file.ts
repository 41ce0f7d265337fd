// `signbridge digest` and `signbridge sign`: sign a FILE with a tenant's key over the HTTP API, whatever the key
// spec, without the user knowing what ML-DSA's μ or SM2's SM3(Z_A || M) are (docs/keys.md). The public key comes from
// get_public_key, the representative is computed here from the file (streamed), `sign` names the algorithm, and
// the returned signature is verified against the public key before it is written. Messages go to stderr; stdout
// carries only what a script reads (the request body for `digest`).
import { writeFileSync } from 'node:fs';
import type { Command } from 'commander';
import type { RemoteUpstream } from '../../daemon/upstream/remote-upstream.js';
import type { PublicKeyInfo, SignBatchResult, SignContext, SignResult } from '../../daemon/upstream/upstream.js';
import { BatchNeedsApproval, BatchUnsupported, UpstreamError } from '../../daemon/upstream/upstream.js';
import { WireStatus } from '../../wire/wire.js';
import type { SigningAlgorithm } from '../crypto/algorithms.js';
import { chooseAlgorithm, fileRepresentative, RepresentativeError } from '../crypto/file-representative.js';
import { verifyFileSignature } from '../crypto/verify-signature.js';
import { BATCH_MAX } from '../signing/batch-signer.js';
import { addCiOptions, ciEnabled } from './ci/ci-options.js';
import { ExchangeError } from './ci/exchange.js';
import { IdTokenError } from './ci/id-token.js';
import { openCiServiceClient, openServiceClient, ServiceClientError, type ServiceFlags } from './service-client.js';
import { keepLogProof, logWaitSeconds, readSignWitnessPolicy } from './sign-log-proof.js';

/** Exit status of a `sign` whose request waits for approval (no signature written; collect it later). */
export const EXIT_PENDING = 3;

interface DigestFlags extends ServiceFlags {
  tenant: string;
  algorithm?: string;
}

interface SignFlags extends DigestFlags {
  project?: string;
  environment?: string;
  artifactType?: string;
  artifactVersion?: string;
  out?: string;
  wait?: boolean;
  requestId?: string;
  pollInterval: string;
  logProof?: boolean;
  witnessPolicy?: string;
}

const say = (line: string) => process.stderr.write(`${line}\n`);

function serviceOptions(cmd: Command): Command {
  return addCiOptions(cmd)
    .requiredOption('--tenant <id>', 'the tenant whose current key signs')
    .option('--algorithm <name>', "signing algorithm (AWS KMS names); default: the key's own (docs/keys.md)")
    .option('--service-url <url>', 'signing service base URL (env SIGNBRIDGE_SERVICE_URL; default: the last login)')
    .option(
      '--api-key-file <file>',
      'file holding the API key, mode 600 (or env SIGNBRIDGE_API_KEY_FILE, SIGNBRIDGE_API_KEY; default: the key from `signbridge login`)',
    )
    .option('--insecure-http', 'allow a plain http:// service URL to another host (the key would travel unencrypted)')
    .option('--timeout <seconds>', 'how long one request to the service may take', '30');
}

export function registerSignFileCommands(program: Command): void {
  serviceOptions(
    program
      .command('digest')
      .description(
        'print the `sign` request body for FILE: the hash to send (SHA-2, ML-DSA mu or SM2 SM3(Z_A||M)) and the algorithm',
      )
      .argument('<file>', 'the file to sign (read in chunks)'),
  ).action(async (file: string, flags: DigestFlags) => {
    process.exitCode = await run('digest', flags, async (client) => {
      const { key, algorithm, hash } = await prepare(client, flags, file);
      say(`tenant ${flags.tenant}: key ${key.keyId} (${key.keySpec}); the hash is for this key version only`);
      process.stdout.write(
        `${JSON.stringify({ action: 'sign', tenant_id: flags.tenant, algorithm, hash: hash.toString('base64') })}\n`,
      );
      return 0;
    });
  });

  serviceOptions(
    program
      .command('sign')
      .description(
        'sign FILE through the service with the tenant key, verify the signature, write it to FILE.sig; several files go in batches of up to 1000 (POST /v1/sign_batch)',
      )
      .argument('<files...>', 'the files to sign (read in chunks, never sent)'),
  )
    .option('--out <file>', 'where to write the signature (default: FILE.sig; one file only)')
    .option('--wait', 'when the policy asks for approval, wait for the decision and collect the signature')
    .option('--request-id <id>', 'collect the signature of an earlier request that waited for approval')
    .option('--poll-interval <seconds>', 'how often --wait asks the service', '2')
    .option(
      '--log-proof',
      "also write the signature's transparency-log proof to FILE.sig.tlog-proof (C2SP tlog-proof; the service waits for its checkpoint, about a second)",
    )
    .option(
      '--witness-policy <file>',
      "with --log-proof: a C2SP tlog-policy file (as for `audit prove`); the service waits for a checkpoint its witnesses cosigned, and the proof is kept only if the policy's quorum cosigned it",
    )
    .option('--project <name>', 'policy input: project')
    .option('--environment <name>', 'policy input: environment (e.g. production)')
    .option('--artifact-type <type>', 'policy input: type of artifact')
    .option('--artifact-version <version>', 'policy input: version of the artifact')
    .addHelpText(
      'after',
      '\nSignature format: RSA and ML-DSA raw, ECDSA and SM2 DER (as AWS KMS returns them). Exit status: 0 signed,\n' +
        `1 failed, ${EXIT_PENDING} waiting for approval (the request id is printed; collect with --request-id or --wait).`,
    )
    .action(async (files: string[], flags: SignFlags) => {
      process.exitCode = await run('sign', flags, (client) =>
        files.length === 1 ? signFile(client, flags, files[0] as string) : signFiles(client, flags, files),
      );
    });
}

async function run(
  command: string,
  flags: DigestFlags,
  body: (client: RemoteUpstream) => Promise<number>,
): Promise<number> {
  let client: RemoteUpstream | undefined;
  try {
    client = ciEnabled(flags) ? await openCiServiceClient(flags, flags.tenant) : openServiceClient(flags);
    return await body(client);
  } catch (err) {
    say(`signbridge ${command}: ${describe(err)}`);
    return 1;
  } finally {
    await client?.close();
  }
}

function describe(err: unknown): string {
  if (err instanceof UpstreamError) return `${err.message}${retryable(err) ? ' (temporary: try again)' : ''}`;
  if (err instanceof ExchangeError) return `${err.message}${err.retryable ? ' (temporary: try again)' : ''}`;
  if (err instanceof ServiceClientError || err instanceof RepresentativeError || err instanceof IdTokenError) {
    return err.message;
  }
  const e = err as NodeJS.ErrnoException;
  if (e.code === 'ENOENT' || e.code === 'EACCES' || e.code === 'EISDIR') return `${e.path ?? 'file'}: ${e.code}`;
  return e.message ?? String(err);
}

function retryable(err: UpstreamError): boolean {
  return err.status === WireStatus.UNAVAILABLE || err.status === WireStatus.TIMEOUT;
}

async function prepare(client: RemoteUpstream, flags: DigestFlags, file: string) {
  const key = await client.getPublicKey(flags.tenant);
  const algorithm = chooseAlgorithm(key.keySpec, flags.algorithm);
  const hash = fileRepresentative(file, key, algorithm);
  return { key, algorithm, hash };
}

async function signFile(client: RemoteUpstream, flags: SignFlags, file: string): Promise<number> {
  const out = flags.out ?? `${file}.sig`;
  const interval = pollInterval(flags);
  const policy = readSignWitnessPolicy(flags.witnessPolicy, flags.logProof === true);
  const { key, algorithm, hash } = await prepare(client, flags, file);
  let result: SignResult =
    flags.requestId !== undefined
      ? await client.collect({ tenantId: flags.tenant, requestId: flags.requestId, digest: hash })
      : await client.sign(flags.tenant, algorithm, hash, contextOf(flags), {
          logProof: flags.logProof === true,
          ...(policy && { witnessed: true, waitSeconds: logWaitSeconds(requestTimeoutMs(flags)) }),
        });
  if (result.kind === 'pending') {
    say(`request ${result.requestId} is waiting (${result.status}): ${result.message}`);
    if (!flags.wait) {
      say(
        `collect the signature once it is approved: signbridge sign --tenant ${flags.tenant} ${file} ` +
          `--request-id ${result.requestId}${flags.algorithm ? ` --algorithm ${flags.algorithm}` : ''} (or --wait)`,
      );
      process.stdout.write(`${result.requestId}\n`);
      return EXIT_PENDING;
    }
    const requestId = result.requestId;
    result = await waitForDecision(requestId, interval * 1000, () =>
      client.collect({ tenantId: flags.tenant, requestId, digest: hash }),
    );
  }
  if (result.kind !== 'signed') return EXIT_PENDING;
  const kept = keep(result, key, algorithm, hash, file, out);
  if (kept === 0 && flags.logProof) {
    return keepLogProof(result, out, { tenant: flags.tenant, policyFile: flags.witnessPolicy, policy });
  }
  return kept;
}

/**
 * Several files: their representatives (one key, one algorithm), sent in batches of up to BATCH_MAX; each
 * signature verified and written to FILE.sig. A file that cannot be read, or whose item failed, is named and the
 * others are still signed. A batch the policy holds is one request: its id is printed (or, with --wait, waited
 * for), and --request-id with the same files collects it. A service without sign_batch (or one from before held
 * batches) gets the files one by one. With --log-proof each batch asks for its items' proofs (and with
 * --witness-policy for a witnessed checkpoint), each kept beside its signature as for one file (keepLogProof).
 * Exit status: 1 if any file failed (its signature or its proof), else EXIT_PENDING if any waits for approval,
 * else 0.
 */
async function signFiles(client: RemoteUpstream, flags: SignFlags, files: string[]): Promise<number> {
  if (flags.out !== undefined) throw new ServiceClientError('--out names one signature file: give one FILE, or none');
  if (flags.requestId !== undefined && files.length > BATCH_MAX) {
    throw new ServiceClientError(`--request-id collects one batch request: give at most ${BATCH_MAX} FILEs, as signed`);
  }
  const interval = pollInterval(flags);
  const policy = readSignWitnessPolicy(flags.witnessPolicy, flags.logProof === true);
  const key = await client.getPublicKey(flags.tenant);
  const algorithm = chooseAlgorithm(key.keySpec, flags.algorithm);
  const codes: number[] = [];
  let signatures = 0;
  let proofs = 0;
  const ready: Array<{ file: string; hash: Buffer }> = [];
  for (const file of files) {
    try {
      ready.push({ file, hash: fileRepresentative(file, key, algorithm) });
    } catch (err) {
      say(`signbridge sign: ${file}: ${describe(err)}`);
      codes.push(1);
    }
  }
  let requests = 0;
  for (let at = 0; at < ready.length; at += BATCH_MAX) {
    const chunk = ready.slice(at, at + BATCH_MAX);
    requests++;
    let result: SignBatchResult;
    const batch = {
      tenantId: flags.tenant,
      keySpec: key.keySpec,
      pss: false,
      algorithm,
      context: contextOf(flags),
      digests: chunk.map((c) => c.hash),
      ...(flags.logProof && {
        logProof: policy ? { witnessed: true, waitSeconds: logWaitSeconds(requestTimeoutMs(flags)) } : {},
      }),
    };
    try {
      result = await client.signBatch({
        ...batch,
        ...(flags.requestId !== undefined && { requestId: flags.requestId }),
      });
    } catch (err) {
      if (!(err instanceof BatchNeedsApproval || err instanceof BatchUnsupported)) throw err;
      say(`signbridge sign: ${err.message}; signing these ${chunk.length} files one by one`);
      for (const { file } of chunk) {
        const code = await signFile(client, flags, file).catch(failedFile(file));
        // Signed with its proof (when asked for); one whose proof failed is counted with the failures.
        signatures += code === 0 ? 1 : 0;
        proofs += code === 0 && flags.logProof ? 1 : 0;
        codes.push(code);
      }
      continue;
    }
    if (result.kind === 'pending') {
      // The policy holds the batch as one request: a person approves it once, and it is collected whole.
      const requestId = result.requestId;
      say(`request ${requestId} (${chunk.length} files) is waiting (${result.status}): ${result.message}`);
      if (!flags.wait) {
        say(
          `collect the signatures once it is approved: signbridge sign --tenant ${flags.tenant} ` +
            `${chunk.map((c) => c.file).join(' ')} --request-id ${requestId}` +
            `${flags.algorithm ? ` --algorithm ${flags.algorithm}` : ''} (or --wait)`,
        );
        process.stdout.write(`${requestId}\n`);
        codes.push(...chunk.map(() => EXIT_PENDING));
        continue;
      }
      result = await waitForDecision(requestId, interval * 1000, () => client.signBatch({ ...batch, requestId }));
    }
    for (const [i, item] of result.results.entries()) {
      const { file, hash } = chunk[i] as { file: string; hash: Buffer };
      if ('error' in item) {
        say(`signbridge sign: ${file}: ${item.error.message}${retryable(item.error) ? ' (temporary: try again)' : ''}`);
        codes.push(1);
        continue;
      }
      const signed = {
        kind: 'signed' as const,
        signature: item.signature,
        keyId: result.keyId,
        algorithm: result.algorithm,
        ...(item.logIndex !== undefined && { logIndex: item.logIndex }),
        ...(item.logProof !== undefined && { logProof: item.logProof }),
      };
      const out = `${file}.sig`;
      const kept = keep(signed, key, algorithm, hash, file, out);
      if (kept !== 0 || !flags.logProof) {
        signatures += kept === 0 ? 1 : 0;
        codes.push(kept);
        continue;
      }
      signatures++;
      const proved = keepLogProof(signed, out, { tenant: flags.tenant, policyFile: flags.witnessPolicy, policy });
      proofs += proved === 0 ? 1 : 0;
      codes.push(proved);
    }
  }
  const proofNote = flags.logProof ? `; ${proofs} log proof${proofs === 1 ? '' : 's'} written` : '';
  say(
    `signed ${signatures} of ${files.length} files (${requests} batch request${requests === 1 ? '' : 's'})${proofNote}`,
  );
  if (codes.includes(1)) return 1;
  return codes.includes(EXIT_PENDING) ? EXIT_PENDING : 0;
}

/** --timeout in milliseconds (checked when the client was opened). */
function requestTimeoutMs(flags: SignFlags): number {
  return (flags.timeout === undefined ? 30 : Number(flags.timeout)) * 1000;
}

/** --poll-interval in seconds, checked. */
function pollInterval(flags: SignFlags): number {
  const interval = Number(flags.pollInterval);
  if (!Number.isFinite(interval) || interval <= 0) {
    throw new ServiceClientError(`--poll-interval must be a positive number of seconds, got ${flags.pollInterval}`);
  }
  return interval;
}

function failedFile(file: string): (err: unknown) => number {
  return (err) => {
    say(`signbridge sign: ${file}: ${describe(err)}`);
    return 1;
  };
}

function contextOf(flags: SignFlags): SignContext {
  return {
    ...(flags.project !== undefined && { project: flags.project }),
    ...(flags.environment !== undefined && { environment: flags.environment }),
    ...(flags.artifactType !== undefined && { artifactType: flags.artifactType }),
    ...(flags.artifactVersion !== undefined && { artifactVersion: flags.artifactVersion }),
  };
}

function keep(
  result: SignResult & { kind: 'signed' },
  key: PublicKeyInfo,
  algorithm: SigningAlgorithm,
  hash: Buffer,
  file: string,
  out: string,
): number {
  if (result.keyId !== key.keyId) {
    say(
      `signbridge sign: the signature is from key ${result.keyId}, not ${key.keyId} whose public key was used ` +
        '(the tenant key was rotated meanwhile); nothing written, sign again',
    );
    return 1;
  }
  if (result.algorithm !== algorithm) {
    say(`signbridge sign: the service signed with ${result.algorithm}, not ${algorithm}; nothing written`);
    return 1;
  }
  if (!verifyFileSignature(file, key, algorithm, hash, result.signature)) {
    say(
      `signbridge sign: the signature the service returned does not verify against key ${key.keyId}'s public key ` +
        `(or ${file} changed while it was signed); nothing written`,
    );
    return 1;
  }
  writeFileSync(out, result.signature, { mode: 0o644 });
  say(
    `signed ${file} with key ${key.keyId} (${key.keySpec}, ${algorithm}): ${result.signature.length} bytes, ` +
      `verified, written to ${out}`,
  );
  return 0;
}

/**
 * Polls the request as the daemon does for a module (collect with the same hash) until it is decided: the
 * signature, or the service's final answer (rejected, expired, denied at approval) as an error. A service that
 * cannot be reached for a while is asked again; the progress goes to stderr.
 */
async function waitForDecision<R extends { kind: 'signed' } | { kind: 'pending'; status: string }>(
  requestId: string,
  intervalMs: number,
  collect: () => Promise<R>,
): Promise<Extract<R, { kind: 'signed' }>> {
  const started = Date.now();
  let lastStatus = '';
  let lastNote = 0;
  for (;;) {
    await new Promise((r) => setTimeout(r, intervalMs));
    let result: R;
    try {
      result = await collect();
    } catch (err) {
      if (err instanceof UpstreamError && retryable(err)) {
        say(`still waiting for ${requestId}; the service did not answer (${err.message}), asking again`);
        continue;
      }
      throw err;
    }
    if (result.kind === 'signed') return result as Extract<R, { kind: 'signed' }>;
    const elapsed = Math.round((Date.now() - started) / 1000);
    // A line when the stage changes, and one a minute otherwise: a CI log does not fill with one line per poll.
    if (result.status !== lastStatus || elapsed - lastNote >= 60) {
      say(`waiting for ${requestId}: ${result.status} (${elapsed} s)`);
      lastStatus = result.status;
      lastNote = elapsed;
    }
  }
}
