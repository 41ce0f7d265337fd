// A stand-in for AWS KMS that speaks its real wire protocol, so the real @aws-sdk/client-kms (its serialisation,
// retries and error parsing) and our error mapping run against it. It is test code and documentation of the KMS
// behaviour signbridge relies on; each part stands in for what KMS documents (sources: the KMS service model in
// botocore 1.43.11 and the developer guide, as quoted in ../shared/NOTES-NEXT-FEATURES.md):
//
// - Protocol: AWS JSON 1.1. POST / with `X-Amz-Target: TrentService.<Operation>` and
//   `Content-Type: application/x-amz-json-1.1`; blobs are base64, timestamps epoch seconds; errors are HTTP 400 with
//   `{"__type": "<Name>Exception", "message": ...}` (5xx for KMS's own failures). Requests are not signature-checked.
// - Keys (§3 "real KMS" column): CreateKey for the twelve key specs with KeyUsage SIGN_VERIFY; Origin AWS_KMS makes
//   the key now, Origin EXTERNAL leaves it `PendingImport` with no material. Key ids are UUIDs; KeyId parameters
//   take the id, its ARN, an alias name or an alias ARN.
// - GetPublicKey: DER SubjectPublicKeyInfo plus `KeySpec` (moto lacks KeySpec).
// - Sign/Verify (§3, §2.1, §2.2): MessageType DIGEST signs the digest as given, no re-hash, and its length "must
//   match the length of hashed messages" for the algorithm (ValidationException otherwise); an EC key signs only
//   with its curve's ECDSA_SHA_*; RSASSA_PSS uses a salt as long as the digest ("along with a 256-bit salt" for
//   SHA-256); EXTERNAL_MU only for ML-DSA, exactly 64 bytes, giving the pure ML-DSA signature of the message;
//   SM2DSA with DIGEST signs e = SM3(Z_A || M) (ID 1234567812345678); ED25519_PH_SHA_512 with DIGEST signs
//   Ed25519ph of the message whose 64-byte SHA-512 it is, and ED25519_SHA_512 requires RAW. RAW is not implemented (signbridge never
//   sends it) and is refused. A "region" can be started without SM2 (KMS has SM2 in its China Regions only).
// - Key states: a Disabled key answers DisabledException; PendingDeletion and PendingImport answer
//   KMSInvalidStateException ("... is pending deletion/import"), for Sign and GetPublicKey alike (moto signs).
// - Aliases: CreateAlias (AlreadyExistsException when taken), UpdateAlias, DeleteAlias, ListAliases (KeyId filter,
//   Limit); names must start with alias/ and match [a-zA-Z0-9:/_-]. TagResource. DisableKey/EnableKey.
//   ScheduleKeyDeletion: 7 to 30 days, the key goes PendingDeletion.
// - Import (§1.2): GetParametersForImport only for Origin EXTERNAL (UnsupportedOperationException otherwise),
//   a fresh RSA wrapping key of the requested spec and an import token, linked and valid 24 hours.
//   ImportKeyMaterial opens the blob for real (unwrap.ts) and answers InvalidImportTokenException for a token that
//   is not this key's, ExpiredImportTokenException past ParametersValidTo, InvalidCiphertextException when the
//   blob does not open, IncorrectKeyMaterialException when the material is not a key of the key spec or differs
//   from what was imported before ("you cannot change the key material after the initial import"). ValidTo is
//   required with KEY_MATERIAL_EXPIRES (the default model), must be in the future and at most 365 days ahead;
//   when it passes, the material is deleted and the key is PendingImport until the same material is imported
//   again. DeleteImportedKeyMaterial does the same at once.
//
// And test controls: a fault table (the next N calls of an operation: a delay, ThrottlingException, a 500
// KMSInternalException or 503, a dropped connection, or NotFound as KMS answers briefly after CreateKey), a clock
// that tests move forward (import expiry), and counts of the calls each operation received.
import { generateKeyPair, type KeyObject, randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import {
  digestLength,
  fromPkcs8,
  generate,
  KMS_KEY_SPECS,
  type KmsKeySpec,
  type Material,
  sign,
  signingAlgorithms,
  verify,
} from './key-material.js';
import { KMS_WRAPPING_ALGORITHMS, unwrapKeyMaterial } from './unwrap.js';

const ACCOUNT = '111122223333';
const REGION = 'us-east-1';
const DAY_MS = 86_400_000;

export type FaultKind = 'delay' | 'throttle' | 'internal' | 'unavailable' | 'drop' | 'not-found';
export interface Fault {
  /** An operation name (Sign, CreateKey, ...) or '*' for every one. */
  op: string;
  kind: FaultKind;
  /** How many calls it hits; -1: until cleared. */
  times: number;
  /** For 'delay': how long the answer waits. */
  ms?: number;
}

type KeyState = 'Enabled' | 'Disabled' | 'PendingDeletion' | 'PendingImport';

interface DoubleKey {
  id: string;
  arn: string;
  spec: KmsKeySpec;
  origin: 'AWS_KMS' | 'EXTERNAL';
  state: KeyState;
  description: string;
  tags: Array<{ TagKey: string; TagValue: string }>;
  createdAt: number;
  material?: Material;
  /** The public key of the first import: a reimport must be the same material. */
  importedSpki?: Buffer;
  materialValidTo?: number;
  deletionDate?: number;
}

interface ImportParams {
  keyId: string;
  wrappingKey: KeyObject;
  algorithm: string;
  validTo: number;
}

class KmsFault extends Error {
  constructor(
    readonly type: string,
    message: string,
    readonly status = 400,
  ) {
    super(message);
  }
}

export interface KmsDouble {
  /** http://127.0.0.1:<port>: the endpoint for the SDK. */
  url: string;
  keys: Map<string, DoubleKey>;
  aliases: Map<string, string>;
  /** Calls received per operation (retries included). */
  calls: Map<string, number>;
  addFault(fault: Fault): void;
  clearFaults(): void;
  /** Moves the double's clock forward (import tokens and key material expire by it). */
  advance(ms: number): void;
  /** The double's clock (ms since the epoch). */
  now(): number;
  /** DisableKey/EnableKey, ScheduleKeyDeletion etc. are also reachable from the SDK; this is for setups. */
  key(keyId: string): DoubleKey;
  close(): Promise<void>;
}

export interface KmsDoubleOptions {
  /** Key specs this "region" does not offer (SM2 exists only in KMS's China Regions). */
  unavailableSpecs?: readonly KmsKeySpec[];
}

export async function startKmsDouble(options: KmsDoubleOptions = {}): Promise<KmsDouble> {
  const keys = new Map<string, DoubleKey>();
  const aliases = new Map<string, string>();
  const imports = new Map<string, ImportParams>();
  const calls = new Map<string, number>();
  let faults: Fault[] = [];
  let skew = 0;
  const now = () => Date.now() + skew;

  function findKey(keyId: unknown): DoubleKey {
    if (typeof keyId !== 'string' || keyId === '') throw new KmsFault('ValidationException', 'KeyId is required');
    let id = keyId;
    if (id.includes(':alias/')) id = id.slice(id.indexOf(':alias/') + 1);
    if (id.startsWith('alias/')) {
      const target = aliases.get(id);
      if (!target) throw new KmsFault('NotFoundException', `Alias ${aliasArn(id)} is not found.`);
      id = target;
    }
    if (id.startsWith('arn:')) id = id.slice(id.lastIndexOf('/') + 1);
    const key = keys.get(id);
    if (!key) throw new KmsFault('NotFoundException', `Key '${keyArn(id)}' does not exist`);
    expireMaterial(key);
    return key;
  }

  /** "KMS deletes the key material from the KMS key on the specified date, making the KMS key unusable." */
  function expireMaterial(key: DoubleKey): void {
    if (key.materialValidTo !== undefined && key.materialValidTo <= now()) {
      delete key.material;
      delete key.materialValidTo;
      if (key.state !== 'PendingDeletion') key.state = 'PendingImport';
    }
  }

  /** The states in which a key can be used for cryptographic operations. */
  function usable(key: DoubleKey): Material {
    if (key.state === 'Disabled') throw new KmsFault('DisabledException', `${key.arn} is disabled.`);
    if (key.state === 'PendingDeletion')
      throw new KmsFault('KMSInvalidStateException', `${key.arn} is pending deletion.`);
    if (key.state === 'PendingImport' || !key.material) {
      throw new KmsFault('KMSInvalidStateException', `${key.arn} is pending import.`);
    }
    return key.material;
  }

  function metadata(key: DoubleKey) {
    return {
      AWSAccountId: ACCOUNT,
      KeyId: key.id,
      Arn: key.arn,
      CreationDate: key.createdAt / 1000,
      Enabled: key.state === 'Enabled',
      Description: key.description,
      KeyUsage: 'SIGN_VERIFY',
      KeyState: key.state,
      Origin: key.origin,
      KeyManager: 'CUSTOMER',
      KeySpec: key.spec,
      CustomerMasterKeySpec: key.spec,
      SigningAlgorithms: signingAlgorithms(key.spec),
      MultiRegion: false,
      ...(key.deletionDate !== undefined && { DeletionDate: key.deletionDate / 1000 }),
      ...(key.materialValidTo !== undefined && {
        ValidTo: key.materialValidTo / 1000,
        ExpirationModel: 'KEY_MATERIAL_EXPIRES',
      }),
    };
  }

  function checkMessage(key: DoubleKey, body: Record<string, unknown>): Buffer {
    const algorithm = String(body.SigningAlgorithm);
    if (!signingAlgorithms(key.spec).includes(algorithm)) {
      throw new KmsFault(
        'InvalidKeyUsageException',
        `${algorithm} is not a valid signing algorithm for ${key.spec} key ${key.arn}`,
      );
    }
    const message = blob(body.Message, 'Message');
    const type = body.MessageType ?? 'RAW';
    if (type === 'RAW') {
      // The double signs digests only; RAW is refused as KMS would refuse an oversized one.
      throw new KmsFault('ValidationException', 'this KMS double implements MessageType DIGEST and EXTERNAL_MU only');
    }
    if (type === 'EXTERNAL_MU' && !key.spec.startsWith('ML_DSA')) {
      throw new KmsFault('ValidationException', 'MessageType EXTERNAL_MU is valid only for ML-DSA keys');
    }
    if (type === 'DIGEST' && algorithm === 'ED25519_SHA_512') {
      // Pure Ed25519 signs the message itself: KMS's model says it "requires MessageType RAW".
      throw new KmsFault('ValidationException', 'ED25519_SHA_512 requires MessageType RAW');
    }
    if (type === 'DIGEST' && key.spec.startsWith('ML_DSA')) {
      throw new KmsFault('ValidationException', 'ML-DSA keys take MessageType RAW or EXTERNAL_MU');
    }
    if (message.length !== digestLength(algorithm)) {
      throw new KmsFault(
        'ValidationException',
        `Digest is invalid length for algorithm ${algorithm}: the length of Message must match the length of hashed messages (${digestLength(algorithm)} bytes)`,
      );
    }
    return message;
  }

  const operations: Record<string, (body: Record<string, unknown>) => unknown> = {
    async CreateKey(body) {
      const spec = body.KeySpec as KmsKeySpec;
      if (!KMS_KEY_SPECS.includes(spec)) throw new KmsFault('ValidationException', `KeySpec ${spec} is not supported`);
      if (options.unavailableSpecs?.includes(spec)) {
        throw new KmsFault('UnsupportedOperationException', `${spec} is not supported in this region`);
      }
      if (body.KeyUsage !== 'SIGN_VERIFY') {
        throw new KmsFault('ValidationException', 'this KMS double makes SIGN_VERIFY keys only');
      }
      const origin = (body.Origin ?? 'AWS_KMS') as DoubleKey['origin'];
      if (origin !== 'AWS_KMS' && origin !== 'EXTERNAL') throw new KmsFault('UnsupportedOperationException', origin);
      const id = randomUUID();
      const key: DoubleKey = {
        id,
        arn: keyArn(id),
        spec,
        origin,
        state: origin === 'EXTERNAL' ? 'PendingImport' : 'Enabled',
        description: String(body.Description ?? ''),
        tags: (body.Tags as DoubleKey['tags']) ?? [],
        createdAt: now(),
        ...(origin === 'AWS_KMS' && { material: await generate(spec) }),
      };
      keys.set(id, key);
      return { KeyMetadata: metadata(key) };
    },
    DescribeKey: (body) => ({ KeyMetadata: metadata(findKey(body.KeyId)) }),
    GetPublicKey(body) {
      const key = findKey(body.KeyId);
      const material = usable(key);
      return {
        KeyId: key.arn,
        PublicKey: material.spki.toString('base64'),
        KeySpec: key.spec,
        CustomerMasterKeySpec: key.spec,
        KeyUsage: 'SIGN_VERIFY',
        SigningAlgorithms: signingAlgorithms(key.spec),
      };
    },
    Sign(body) {
      const key = findKey(body.KeyId);
      const material = usable(key);
      const message = checkMessage(key, body);
      const signature = sign(material, String(body.SigningAlgorithm), message);
      return { KeyId: key.arn, Signature: signature.toString('base64'), SigningAlgorithm: body.SigningAlgorithm };
    },
    Verify(body) {
      const key = findKey(body.KeyId);
      const material = usable(key);
      const message = checkMessage(key, body);
      if (!verify(material, String(body.SigningAlgorithm), message, blob(body.Signature, 'Signature'))) {
        throw new KmsFault('KMSInvalidSignatureException', 'the signature does not verify');
      }
      return { KeyId: key.arn, SignatureValid: true, SigningAlgorithm: body.SigningAlgorithm };
    },
    CreateAlias(body) {
      const name = aliasName(body.AliasName);
      if (aliases.has(name))
        throw new KmsFault('AlreadyExistsException', `An alias with the name ${aliasArn(name)} already exists`);
      aliases.set(name, findKey(body.TargetKeyId).id);
      return {};
    },
    UpdateAlias(body) {
      const name = aliasName(body.AliasName);
      if (!aliases.has(name)) throw new KmsFault('NotFoundException', `Alias ${aliasArn(name)} is not found.`);
      aliases.set(name, findKey(body.TargetKeyId).id);
      return {};
    },
    DeleteAlias(body) {
      const name = aliasName(body.AliasName);
      if (!aliases.delete(name)) throw new KmsFault('NotFoundException', `Alias ${aliasArn(name)} is not found.`);
      return {};
    },
    ListAliases(body) {
      const only = body.KeyId === undefined ? undefined : findKey(body.KeyId).id;
      const all = [...aliases]
        .filter(([, target]) => only === undefined || target === only)
        .map(([name, target]) => ({ AliasName: name, AliasArn: aliasArn(name), TargetKeyId: target }));
      const limit = typeof body.Limit === 'number' ? body.Limit : 100;
      return { Aliases: all.slice(0, limit), Truncated: all.length > limit };
    },
    TagResource(body) {
      findKey(body.KeyId).tags.push(...((body.Tags as DoubleKey['tags']) ?? []));
      return {};
    },
    DisableKey(body) {
      const key = findKey(body.KeyId);
      if (key.state === 'PendingDeletion' || key.state === 'PendingImport') {
        throw new KmsFault('KMSInvalidStateException', `${key.arn} is ${stateWords(key.state)}.`);
      }
      key.state = 'Disabled';
      return {};
    },
    EnableKey(body) {
      const key = findKey(body.KeyId);
      if (key.state === 'PendingDeletion' || key.state === 'PendingImport') {
        throw new KmsFault('KMSInvalidStateException', `${key.arn} is ${stateWords(key.state)}.`);
      }
      key.state = 'Enabled';
      return {};
    },
    ScheduleKeyDeletion(body) {
      const key = findKey(body.KeyId);
      const days = (body.PendingWindowInDays as number | undefined) ?? 30;
      if (days < 7 || days > 30) throw new KmsFault('ValidationException', 'PendingWindowInDays must be 7 to 30');
      key.state = 'PendingDeletion';
      key.deletionDate = now() + days * DAY_MS;
      return { KeyId: key.arn, DeletionDate: key.deletionDate / 1000, KeyState: key.state, PendingWindowInDays: days };
    },
    async GetParametersForImport(body) {
      const key = findKey(body.KeyId);
      if (key.origin !== 'EXTERNAL') {
        throw new KmsFault(
          'UnsupportedOperationException',
          `${key.arn} origin is AWS_KMS which is not valid for this operation.`,
        );
      }
      if (key.state === 'PendingDeletion')
        throw new KmsFault('KMSInvalidStateException', `${key.arn} is pending deletion.`);
      const algorithm = String(body.WrappingAlgorithm);
      if (!(KMS_WRAPPING_ALGORITHMS as readonly string[]).includes(algorithm)) {
        throw new KmsFault('ValidationException', `WrappingAlgorithm ${algorithm} is not supported`);
      }
      const bits = { RSA_2048: 2048, RSA_3072: 3072, RSA_4096: 4096 }[String(body.WrappingKeySpec)];
      if (!bits) throw new KmsFault('ValidationException', `WrappingKeySpec ${body.WrappingKeySpec} is not supported`);
      const { privateKey, publicKey } = await generateRsa(bits);
      const token = randomBytes(48);
      const validTo = now() + DAY_MS;
      imports.set(token.toString('base64'), { keyId: key.id, wrappingKey: privateKey, algorithm, validTo });
      return {
        KeyId: key.arn,
        ImportToken: token.toString('base64'),
        PublicKey: publicKey.export({ type: 'spki', format: 'der' }).toString('base64'),
        ParametersValidTo: validTo / 1000,
      };
    },
    ImportKeyMaterial(body) {
      const key = findKey(body.KeyId);
      if (key.origin !== 'EXTERNAL') throw new KmsFault('UnsupportedOperationException', `${key.arn} is not EXTERNAL`);
      if (key.state === 'PendingDeletion')
        throw new KmsFault('KMSInvalidStateException', `${key.arn} is pending deletion.`);
      const params = imports.get(blob(body.ImportToken, 'ImportToken').toString('base64'));
      if (!params || params.keyId !== key.id) {
        throw new KmsFault('InvalidImportTokenException', 'the import token is not valid for this KMS key');
      }
      if (params.validTo <= now()) throw new KmsFault('ExpiredImportTokenException', 'the import token has expired');
      const model = body.ExpirationModel ?? 'KEY_MATERIAL_EXPIRES';
      let validTo: number | undefined;
      if (model === 'KEY_MATERIAL_EXPIRES') {
        if (typeof body.ValidTo !== 'number') throw new KmsFault('ValidationException', 'ValidTo is required');
        validTo = body.ValidTo * 1000;
        if (validTo <= now() || validTo > now() + 365 * DAY_MS) {
          throw new KmsFault('ValidationException', 'ValidTo must be in the future and at most 365 days from now');
        }
      } else if (body.ValidTo !== undefined) {
        throw new KmsFault('ValidationException', 'ValidTo is valid only with KEY_MATERIAL_EXPIRES');
      }
      const der = unwrapKeyMaterial(
        params.algorithm,
        params.wrappingKey,
        blob(body.EncryptedKeyMaterial, 'EncryptedKeyMaterial'),
      );
      if (!der) throw new KmsFault('InvalidCiphertextException', 'the encrypted key material could not be decrypted');
      const material = fromPkcs8(key.spec, der);
      if (!material) {
        throw new KmsFault('IncorrectKeyMaterialException', `the key material is not a ${key.spec} private key`);
      }
      if (key.importedSpki && !key.importedSpki.equals(material.spki)) {
        throw new KmsFault(
          'IncorrectKeyMaterialException',
          'the key material differs from the material imported before',
        );
      }
      key.importedSpki = material.spki;
      key.material = material;
      if (validTo === undefined) delete key.materialValidTo;
      else key.materialValidTo = validTo;
      key.state = 'Enabled';
      return { KeyId: key.arn, KeyMaterialId: key.importedSpki.subarray(-32).toString('hex') };
    },
    DeleteImportedKeyMaterial(body) {
      const key = findKey(body.KeyId);
      if (key.origin !== 'EXTERNAL') throw new KmsFault('UnsupportedOperationException', `${key.arn} is not EXTERNAL`);
      delete key.material;
      delete key.materialValidTo;
      if (key.state !== 'PendingDeletion') key.state = 'PendingImport';
      return { KeyId: key.arn };
    },
  };

  /** The first fault for `op` that still has calls to hit, used up by one. */
  function takeFault(op: string): Fault | undefined {
    const fault = faults.find((f) => (f.op === op || f.op === '*') && f.times !== 0);
    if (fault && fault.times > 0) fault.times--;
    return fault;
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const target = String(req.headers['x-amz-target'] ?? '');
    const op = target.startsWith('TrentService.') ? target.slice('TrentService.'.length) : '';
    calls.set(op, (calls.get(op) ?? 0) + 1);
    const fault = takeFault(op);
    if (fault?.kind === 'drop') {
      req.socket.destroy();
      return;
    }
    if (fault?.kind === 'delay') await new Promise((resolve) => setTimeout(resolve, fault.ms ?? 0));
    try {
      if (fault?.kind === 'throttle') throw new KmsFault('ThrottlingException', 'Rate exceeded');
      if (fault?.kind === 'internal') throw new KmsFault('KMSInternalException', 'internal error', 500);
      if (fault?.kind === 'unavailable') throw new KmsFault('ServiceUnavailableException', 'service unavailable', 503);
      if (fault?.kind === 'not-found') throw new KmsFault('NotFoundException', 'Key does not exist (yet)');
      const run = operations[op];
      if (!run || req.headers['content-type'] !== 'application/x-amz-json-1.1') {
        throw new KmsFault('UnknownOperationException', `unknown operation ${target}`);
      }
      const body = chunks.length ? (JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>) : {};
      send(res, 200, await run(body));
    } catch (err) {
      const e = err instanceof KmsFault ? err : new KmsFault('KMSInternalException', String(err), 500);
      send(res, e.status, { __type: e.type, message: e.message });
    }
  }

  const server = createServer((req, res) => {
    handle(req, res).catch(() => res.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    keys,
    aliases,
    calls,
    addFault: (fault) => faults.push({ ...fault }),
    clearFaults: () => {
      faults = [];
    },
    advance: (ms) => {
      skew += ms;
    },
    now,
    key: (keyId) => findKey(keyId),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** RSA key generation off the event loop: an RSA-4096 key takes seconds, and the SDK's timers keep running. */
export const generateRsa = (modulusLength: number) => promisify(generateKeyPair)('rsa', { modulusLength });

function send(res: ServerResponse, status: number, body: unknown): void {
  const payload = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/x-amz-json-1.1',
    'content-length': Buffer.byteLength(payload),
    'x-amzn-requestid': randomUUID(),
  });
  res.end(payload);
}

function blob(value: unknown, field: string): Buffer {
  if (typeof value !== 'string' || value === '') throw new KmsFault('ValidationException', `${field} is required`);
  return Buffer.from(value, 'base64');
}

function aliasName(value: unknown): string {
  const name = String(value ?? '');
  if (!/^alias\/[a-zA-Z0-9:/_-]+$/.test(name) || name.startsWith('alias/aws/')) {
    throw new KmsFault('ValidationException', `Alias name ${name} is not valid`);
  }
  return name;
}

function keyArn(id: string): string {
  return `arn:aws:kms:${REGION}:${ACCOUNT}:key/${id}`;
}

function aliasArn(name: string): string {
  return `arn:aws:kms:${REGION}:${ACCOUNT}:${name}`;
}

function stateWords(state: KeyState): string {
  return state === 'PendingDeletion' ? 'pending deletion' : 'pending import';
}
