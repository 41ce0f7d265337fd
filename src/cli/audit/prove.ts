// `signbridge audit prove`: that a signature (by its file, its digest or its log index) is in the service's audit
// log, checked here against the log's key: the checkpoint's signature, the inclusion proof, the entry's bytes, and
// that the entry is this tenant's record of this artifact. `--out` keeps the proof beside the artifact (a C2SP
// tlog-proof@v1 file by default, verify/tlog-proof.ts); `--bundle` checks a kept proof with nothing but the key.
import { readFileSync, writeFileSync } from 'node:fs';
import type { Command } from 'commander';
import { type ArtifactExpectation, checkEntryFor } from '../../transparency/verify/artifact-match.js';
import {
  BUNDLE_FORMAT,
  type InclusionBundleJson,
  InclusionError,
  parseInclusionBundle,
  type VerifiedInclusion,
  verifyInclusionBundle,
} from '../../transparency/verify/inclusion-bundle.js';
import { hex8, strictBase64, type VerifierKey } from '../../transparency/verify/note.js';
import {
  bundleToTlogProof,
  decodeTlogProof,
  encodeTlogProof,
  isTlogProof,
  TlogProofFormatError,
  tlogProofToBundle,
} from '../../transparency/verify/tlog-proof.js';
import {
  AuditUsageError,
  EXIT_NOT_PROVEN,
  EXIT_VERIFIED,
  type LogFlags,
  logKey,
  logOptions,
  openLogHttp,
  pinnedKey,
  policyLogKey,
  requireQuorum,
  runAudit,
  say,
  witnessPolicyOf,
} from './common.js';
import { type InclusionQuery, type LogHttp, LogServiceError, LogUnavailableError } from './log-http.js';
import { signatureSha256Forms } from './signature-forms.js';

interface ProveFlags extends LogFlags {
  tenant?: string;
  signature?: string;
  digest?: string;
  index?: string;
  item?: string;
  out?: string;
  format: string;
  bundle?: string;
  wait?: string;
}

const OUT_FORMATS = ['tlog-proof', 'json'];

export function registerProveCommand(audit: Command): void {
  logOptions(
    audit
      .command('prove')
      .description(
        "prove that a signature is in the service's audit log: fetch its entry, inclusion proof and signed checkpoint and verify them here against the log's key",
      )
      .option('--tenant <id>', 'the tenant whose signature it is: the entry must be its (required unless --bundle)')
      .option(
        '--signature <file>',
        'the signature file (`signbridge sign` wrote it, or raw ECDSA r||s from the PKCS#11 module); looked up by its SHA-256',
      )
      .option('--digest <base64>', 'the digest that was signed, base64 (as `signbridge digest` prints it)')
      .option('--index <n>', 'the log index (the Signbridge-Log-Index header of the signing response)')
      .option(
        '--item <n>',
        "with --index of a batch's entry: the signature at this place in the sign_batch request (the number after the dot of its signature_id)",
      )
      .option(
        '--out <file>',
        'save the verified proof (entry, proof, checkpoint) here, to keep with the artifact (e.g. app.sig.tlog-proof)',
      )
      .option(
        '--format <format>',
        'what --out writes: tlog-proof (C2SP tlog-proof@v1, the entry in its extra line) or json (signbridge-log-inclusion-v1)',
        'tlog-proof',
      )
      .option(
        '--wait <seconds>',
        'if the service has not logged the signature yet, ask again until it has, up to this many seconds',
      )
      .option(
        '--bundle <file>',
        'verify a proof saved with --out (either format) instead of asking the service (needs --public-key)',
      ),
  )
    .addHelpText(
      'after',
      '\nExit status: 0 verified, 1 the log does not prove it, 2 it could not be checked (service unreachable or\n' +
        'refusing, bad arguments). Without --public-key the key comes from the service: pin it.',
    )
    .action(async (flags: ProveFlags) => {
      process.exitCode = await runAudit('prove', () => prove(flags));
    });
}

async function prove(flags: ProveFlags): Promise<number> {
  const expected = expectation(flags);
  if (flags.bundle !== undefined) {
    if (flags.publicKey === undefined) {
      const fromPolicy = policyLogKey(flags);
      if (!fromPolicy)
        throw new AuditUsageError('--bundle needs --public-key: offline, the log’s key can only come from you');
      flags.publicKey = fromPolicy.vkey;
    }
    if (flags.out !== undefined) throw new AuditUsageError('--bundle and --out: the bundle is already saved');
    if (flags.wait !== undefined)
      throw new AuditUsageError('--bundle and --wait: a kept proof is read, not waited for');
    const key = pinnedKey(flags.publicKey);
    const kept = readKeptProof(flags.bundle);
    const verified = verifyInclusionBundle(kept, key);
    requireQuorum(witnessPolicyOf(flags), kept.checkpoint, verified.checkpoint);
    checkEntryFor(verified.entry, expected, verified.item);
    if (flags.index !== undefined && verified.index !== lookupIndex(flags.index)) {
      say(`signbridge audit prove: the bundle proves index ${verified.index}, not ${flags.index}`);
      return EXIT_NOT_PROVEN;
    }
    report(verified, `bundle ${flags.bundle}`, key);
    return EXIT_VERIFIED;
  }
  if (flags.tenant === undefined) throw new AuditUsageError('--tenant is required (unless --bundle)');
  const queries = lookups(flags, expected);
  const waitMs = waitSeconds(flags.wait) * 1000;
  const log = openLogHttp(flags);
  const key = await logKey(flags, log);
  const found = await inclusionOf(log, queries, waitMs);
  if ('missing' in found) {
    const waited = waitMs > 0 ? ` after waiting ${flags.wait} s` : ' (it may not be logged yet: --wait SECONDS waits)';
    say(
      `signbridge audit prove: the service has no log entry for this ${describeQuery(found.query)}${waited} (${found.missing})`,
    );
    return EXIT_NOT_PROVEN;
  }
  const { answer, query } = found;
  const bundle = parseInclusionBundle(answer);
  const verified = verifyInclusionBundle(bundle, key);
  requireQuorum(witnessPolicyOf(flags), bundle.checkpoint, verified.checkpoint);
  checkEntryFor(verified.entry, expected, verified.item);
  if ('index' in query && verified.index !== query.index) {
    say(`signbridge audit prove: asked for index ${query.index}, the service proved index ${verified.index}`);
    return EXIT_NOT_PROVEN;
  }
  if ('index' in query && query.item !== undefined && verified.item?.index !== query.item) {
    say(
      `signbridge audit prove: asked for item ${query.item} of index ${query.index}, the service proved no such item`,
    );
    return EXIT_NOT_PROVEN;
  }
  if (flags.out !== undefined) {
    writeFileSync(flags.out, keptProof(bundle, flags.format), { mode: 0o644 });
    say(`proof saved to ${flags.out} (check it later with --bundle ${flags.out} --public-key …)`);
  }
  report(verified, log.origin, key);
  return EXIT_VERIFIED;
}

/**
 * The inclusion answer for the first look-up the service knows. With a wait, a 404 (not logged yet: the integrator
 * takes entries within a second or so) or a busy service is asked again until the wait is over.
 */
async function inclusionOf(
  log: LogHttp,
  queries: InclusionQuery[],
  waitMs: number,
): Promise<{ answer: unknown; query: InclusionQuery } | { missing: string; query: InclusionQuery }> {
  const deadline = Date.now() + waitMs;
  let pause = 250;
  let told = false;
  for (;;) {
    let missing = '';
    try {
      for (const query of queries) {
        try {
          return { answer: await log.inclusion(query), query };
        } catch (err) {
          if (!(err instanceof LogServiceError && err.status === 404)) throw err;
          missing = err.message;
        }
      }
    } catch (err) {
      if (!(err instanceof LogUnavailableError) || Date.now() + pause > deadline) throw err;
      missing = err.message;
    }
    if (Date.now() + pause > deadline) return { missing, query: queries[queries.length - 1] as InclusionQuery };
    if (!told) {
      say(`waiting up to ${Math.round(waitMs / 1000)} s for the log to include it (${missing})`);
      told = true;
    }
    await new Promise((resolve) => setTimeout(resolve, pause));
    pause = Math.min(pause * 2, 2000);
  }
}

function waitSeconds(value: string | undefined): number {
  if (value === undefined) return 0;
  const seconds = Number(value);
  if (!/^[0-9]+$/.test(value) || seconds > 3600) {
    throw new AuditUsageError(`--wait must be whole seconds from 0 to 3600, got ${value}`);
  }
  return seconds;
}

function keptProof(bundle: InclusionBundleJson, format: string): string {
  if (format === 'json') return `${JSON.stringify({ format: BUNDLE_FORMAT, ...bundle }, null, 2)}\n`;
  return encodeTlogProof(bundleToTlogProof(bundle));
}

/** A proof kept by --out: a tlog-proof file (by its first line) or the JSON bundle. */
function readKeptProof(file: string): InclusionBundleJson {
  const text = readFileSync(file, 'utf8');
  if (isTlogProof(text)) {
    try {
      return parseInclusionBundle(tlogProofToBundle(decodeTlogProof(text)));
    } catch (err) {
      if (err instanceof TlogProofFormatError) throw new InclusionError(`--bundle ${file}: ${err.message}`);
      throw err;
    }
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    if (err instanceof SyntaxError) throw new AuditUsageError(`--bundle ${file}: neither a tlog-proof file nor JSON`);
    throw err;
  }
  return parseInclusionBundle(raw);
}

function expectation(flags: ProveFlags): ArtifactExpectation {
  if (!OUT_FORMATS.includes(flags.format)) {
    throw new AuditUsageError(`--format must be one of ${OUT_FORMATS.join(', ')}, got ${flags.format}`);
  }
  const given = [flags.signature, flags.digest, flags.index].filter((v) => v !== undefined).length;
  if (flags.bundle === undefined && given !== 1) {
    throw new AuditUsageError('name the signature: one of --signature FILE, --digest BASE64 or --index N');
  }
  if (given > 1) throw new AuditUsageError('--signature, --digest and --index: give one');
  if (flags.digest !== undefined && strictBase64(flags.digest) === undefined) {
    throw new AuditUsageError(`--digest must be standard base64 (with padding), got ${flags.digest}`);
  }
  if (flags.index !== undefined) lookupIndex(flags.index);
  if (flags.item !== undefined) {
    if (flags.index === undefined) throw new AuditUsageError('--item goes with --index (the batch entry)');
    lookupIndex(flags.item, '--item');
  }
  return {
    ...(flags.tenant !== undefined && { tenant: flags.tenant }),
    ...(flags.digest !== undefined && { digest: flags.digest }),
    ...(flags.signature !== undefined && { signatureSha256s: signatureSha256Forms(readFileSync(flags.signature)) }),
  };
}

/** The look-ups to try in turn: a signature by each form it may be logged in (signature-forms.ts). */
function lookups(flags: ProveFlags, expected: ArtifactExpectation): InclusionQuery[] {
  if (expected.signatureSha256s !== undefined) return expected.signatureSha256s.map((h) => ({ signatureSha256: h }));
  if (expected.digest !== undefined) return [{ digest: expected.digest }];
  const index = lookupIndex(flags.index ?? '');
  return [flags.item !== undefined ? { index, item: lookupIndex(flags.item, '--item') } : { index }];
}

function lookupIndex(value: string, flag = '--index'): number {
  const index = Number(value);
  if (!/^(?:0|[1-9][0-9]*)$/.test(value) || !Number.isSafeInteger(index)) {
    throw new AuditUsageError(`${flag} must be a whole number (0, 1, …), got ${value}`);
  }
  return index;
}

function describeQuery(q: InclusionQuery): string {
  if ('index' in q) return `index ${q.index}${q.item !== undefined ? ` item ${q.item}` : ''}`;
  if ('signatureSha256' in q) return `signature (SHA-256 ${q.signatureSha256})`;
  return `digest ${q.digest}`;
}

function report(v: VerifiedInclusion, source: string, key: VerifierKey): void {
  const e = v.entry;
  const d = e.details;
  const about = [
    typeof d.key_id === 'string' ? `key ${d.key_id}` : undefined,
    typeof d.algorithm === 'string' ? d.algorithm : undefined,
    typeof d.hash === 'string' ? `digest ${d.hash}` : undefined,
    v.item ? `batch item ${v.item.index} (digest ${v.item.digest.toString('base64')}), in the batch's root` : undefined,
  ].filter((x) => x !== undefined);
  process.stdout.write(
    `entry:      index ${v.index} (seq ${e.seq}), tenant ${e.tenantId ?? '(none)'}, ${e.action} → ${e.outcome} at ${e.at} by ${e.actor}\n` +
      (about.length > 0 ? `            ${about.join(', ')}\n` : '') +
      `checkpoint: ${v.checkpoint.origin}, tree size ${v.checkpoint.size}, root ${v.checkpoint.root.toString('base64')}\n` +
      `source:     ${source}\n` +
      `verified:   the entry is in the log; checkpoint signed by ${key.name}+${hex8(key.keyId)}\n`,
  );
}
