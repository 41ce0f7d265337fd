// A time-stamp query (RFC 3161 §2.4.1, `application/timestamp-query`) read from DER. Whatever is wrong with a query
// comes back as a refusal carrying the PKIFailureInfo bit the reply will state, never as a thrown error: a TSA
// answers a bad query with a `rejection`, not with an HTTP 500.
import { AsnConvert } from '@peculiar/asn1-schema';
import { TimeStampReq } from '@peculiar/asn1-tsp';
import { DIGEST_LENGTH, type HashName } from '../crypto/algorithms.js';
import { derStructureProblem, readChildren } from '../crypto/der.js';
import { decodeObjectIdentifier } from '../crypto/object-identifier.js';
import { IMPRINT_HASHES, SHA1_OID } from './tsa-algorithms.js';

/** PKIFailureInfo's named bits (RFC 3161 §2.4.2), by bit number. */
export const PKI_FAILURE_BITS = {
  badAlg: 0,
  badRequest: 2,
  badDataFormat: 5,
  timeNotAvailable: 14,
  unacceptedPolicy: 15,
  unacceptedExtension: 16,
  addInfoNotAvailable: 17,
  systemFailure: 25,
} as const;
export type PkiFailure = keyof typeof PKI_FAILURE_BITS;

/** Why a query is refused: the failure bit for the reply and a sentence for its statusString and the logs. */
export interface TsaRefusal {
  failInfo: PkiFailure;
  reason: string;
}

export interface RequestExtension {
  id: string;
  critical: boolean;
  /** extnValue's contents. */
  value: Buffer;
}

export interface TimeStampRequest {
  version: 1;
  imprint: {
    /** The digest algorithm's OID as the query named it. */
    hashAlgorithm: string;
    hash: HashName;
    hashedMessage: Buffer;
  };
  reqPolicy?: string;
  /** The nonce INTEGER's content octets exactly as sent (two's complement), so the reply echoes the same value. */
  nonce?: Buffer;
  certReq: boolean;
  /** Only ever present when every extension is one the rules accept (none by default). */
  extensions?: RequestExtension[];
}

export interface TimeStampRequestRules {
  /** The policy a query without reqPolicy gets. */
  defaultPolicy: string;
  /** Further policies a query may ask for by reqPolicy (the default is always accepted). */
  acceptedPolicies?: readonly string[];
  /** Extension OIDs this TSA understands; any other extension, critical or not, is refused (RFC 3161 §2.4.1). */
  acceptedExtensions?: readonly string[];
  /** A query is some 60-100 bytes; refuse anything much larger before parsing it (default 4096). */
  maxBytes?: number;
}

export interface AcceptedRequest {
  ok: true;
  request: TimeStampRequest;
  /** The policy the token will carry: the requested one, or the default. */
  policy: string;
}

export type TimeStampRequestResult = AcceptedRequest | { ok: false; refusal: TsaRefusal };

const DEFAULT_MAX_BYTES = 4096;

function refuse(failInfo: PkiFailure, reason: string): TimeStampRequestResult {
  return { ok: false, refusal: { failInfo, reason } };
}

/** Reads a DER TimeStampReq and checks it against the TSA's algorithms, policies and extensions. */
export function parseTimeStampRequest(der: Uint8Array, rules: TimeStampRequestRules): TimeStampRequestResult {
  const maxBytes = rules.maxBytes ?? DEFAULT_MAX_BYTES;
  if (der.length === 0) return refuse('badRequest', 'the query is empty');
  if (der.length > maxBytes) {
    return refuse('badRequest', `the query is ${der.length} bytes; at most ${maxBytes} are read`);
  }
  if (der[0] !== 0x30) return refuse('badRequest', 'the query is not a DER SEQUENCE');
  const problem = derStructureProblem(der);
  if (problem) return refuse('badRequest', `the query is not DER: ${problem}`);

  let req: TimeStampReq;
  try {
    req = AsnConvert.parse(der, TimeStampReq);
  } catch (err) {
    return refuse('badRequest', `the query is not a TimeStampReq: ${(err as Error).message}`);
  }
  if (req.version !== 1) return refuse('badRequest', `version ${String(req.version)} is not supported; only v1 is`);
  // The OIDs as sent: the schema's own text of an arc above 2^53 is wrong (object-identifier.ts).
  const oids = queryObjectIdentifiers(der);
  if (!oids) return refuse('badRequest', 'the query has an OBJECT IDENTIFIER that is not valid DER');

  const imprint = req.messageImprint;
  const oid = oids.hashAlgorithm;
  if (oid === SHA1_OID) return refuse('badAlg', 'SHA-1 imprints are refused; use SHA-256, SHA-384 or SHA-512');
  const hash = IMPRINT_HASHES[oid];
  if (!hash) return refuse('badAlg', `hash algorithm ${oid} is not accepted; use SHA-256, SHA-384 or SHA-512`);
  const params = imprint.hashAlgorithm.parameters;
  // RFC 5754 §2: absent, or NULL (which the parser hands back as null or as its DER 05 00).
  if (params !== undefined && params !== null && !Buffer.from(params).equals(Buffer.from([0x05, 0x00]))) {
    return refuse('badAlg', `the ${hash} AlgorithmIdentifier has parameters; SHA-2 takes none (or NULL)`);
  }
  const hashedMessage = Buffer.from(imprint.hashedMessage.buffer);
  if (hashedMessage.length !== DIGEST_LENGTH[hash]) {
    // OpenSSL's and Bouncy Castle's TSAs answer this with badDataFormat: the algorithm is fine, the data is not.
    return refuse(
      'badDataFormat',
      `the ${hash} imprint is ${hashedMessage.length} bytes; a ${hash} digest is ${DIGEST_LENGTH[hash]}`,
    );
  }

  const accepted = [rules.defaultPolicy, ...(rules.acceptedPolicies ?? [])];
  const reqPolicy = oids.reqPolicy;
  if (reqPolicy !== undefined && !accepted.includes(reqPolicy)) {
    return refuse('unacceptedPolicy', `policy ${reqPolicy} is not offered; this TSA issues ${accepted.join(', ')}`);
  }

  let extensions: RequestExtension[] | undefined;
  if (req.extensions && req.extensions.length > 0) {
    extensions = req.extensions.map((e, i) => ({
      id: oids.extensionIds[i] as string,
      critical: e.critical,
      value: Buffer.from(e.extnValue.buffer),
    }));
    const unknown = extensions.find((e) => !(rules.acceptedExtensions ?? []).includes(e.id));
    if (unknown) {
      return refuse(
        'unacceptedExtension',
        `extension ${unknown.id}${unknown.critical ? ' (critical)' : ''} is not supported by this TSA`,
      );
    }
  }

  const request: TimeStampRequest = {
    version: 1,
    imprint: { hashAlgorithm: oid, hash, hashedMessage },
    certReq: req.certReq,
  };
  if (reqPolicy !== undefined) request.reqPolicy = reqPolicy;
  if (req.nonce !== undefined) {
    if (req.nonce.byteLength === 0) return refuse('badRequest', 'the nonce is an empty INTEGER');
    request.nonce = Buffer.from(req.nonce);
  }
  if (extensions) request.extensions = extensions;
  return { ok: true, request, policy: reqPolicy ?? rules.defaultPolicy };
}

interface QueryObjectIdentifiers {
  hashAlgorithm: string;
  reqPolicy?: string;
  extensionIds: string[];
}

/**
 * The query's OIDs read from its DER (already parsed by the schema, so the shape is a TimeStampReq): the imprint's
 * hash algorithm, reqPolicy, each extension's extnID. Undefined when one is not a valid encoding.
 */
function queryObjectIdentifiers(der: Uint8Array): QueryObjectIdentifiers | undefined {
  const fields = readChildren(readChildren(der)[0]?.content ?? new Uint8Array());
  const firstOid = (content: Uint8Array | undefined) => {
    const element = readChildren(content ?? new Uint8Array())[0];
    return element?.tag === 0x06 ? decodeObjectIdentifier(element.content) : undefined;
  };
  // messageImprint SEQUENCE { AlgorithmIdentifier SEQUENCE { algorithm OID, ... }, ... }
  const hashAlgorithm = firstOid(readChildren(fields[1]?.content ?? new Uint8Array())[0]?.content);
  if (hashAlgorithm === undefined) return undefined;
  const policyField = fields.find((f) => f.tag === 0x06);
  const reqPolicy = policyField && decodeObjectIdentifier(policyField.content);
  if (policyField && reqPolicy === undefined) return undefined;
  const extensionIds = readChildren(fields.find((f) => f.tag === 0xa0)?.content ?? new Uint8Array()).map((e) =>
    firstOid(e.content),
  );
  if (extensionIds.some((id) => id === undefined)) return undefined;
  return { hashAlgorithm, ...(reqPolicy !== undefined && { reqPolicy }), extensionIds: extensionIds as string[] };
}
