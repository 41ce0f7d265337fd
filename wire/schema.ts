// The message table of docs/wire-protocol.md as data: which fields each message carries, their value types,
// which are required and which may repeat. The codec (codec.ts) is driven by this table alone.
import { type MessageName, MessageType, Tag } from './wire.js';

export type ValueKind = 'u32' | 'bool' | 'str' | 'bytes' | 'nested';

export interface FieldSpec {
  tag: number;
  /** Property name in the decoded object. Repeated fields decode to an array. */
  name: string;
  kind: ValueKind;
  required?: boolean;
  repeated?: boolean;
  /** Byte-length bounds of the value (str and bytes). */
  minBytes?: number;
  maxBytes?: number;
  /** For nested fields: the fields inside. */
  fields?: readonly FieldSpec[];
}

export const KEY_FIELDS: readonly FieldSpec[] = [
  { tag: Tag.KEY_ID, name: 'keyId', kind: 'bytes', required: true, minBytes: 1, maxBytes: 64 },
  { tag: Tag.KEY_LABEL, name: 'label', kind: 'str', required: true },
  { tag: Tag.KEY_SPEC, name: 'keySpec', kind: 'str', required: true },
  { tag: Tag.PUBLIC_KEY, name: 'publicKey', kind: 'bytes', required: true },
  { tag: Tag.CERTIFICATE, name: 'certificate', kind: 'bytes' },
  { tag: Tag.CHAIN_CERTIFICATE, name: 'chain', kind: 'bytes', repeated: true },
  // ML-DSA keys: the raw public key (the SPKI's BIT STRING), which the module checks against PUBLIC_KEY.
  { tag: Tag.RAW_PUBLIC_KEY, name: 'rawPublicKey', kind: 'bytes' },
];

export const TOKEN_FIELDS: readonly FieldSpec[] = [
  { tag: Tag.TOKEN_LABEL, name: 'label', kind: 'str', required: true, maxBytes: 32 },
  { tag: Tag.TENANT, name: 'tenant', kind: 'str', required: true },
  { tag: Tag.KEY, name: 'keys', kind: 'nested', repeated: true, fields: KEY_FIELDS },
  // The tenant's own failure (revoked key, timeout, ...): the token is listed without keys and says why.
  { tag: Tag.STATUS, name: 'status', kind: 'u32' },
  { tag: Tag.MESSAGE, name: 'message', kind: 'str' },
];

export const MESSAGE_FIELDS: Record<MessageName, readonly FieldSpec[]> = {
  HELLO: [
    { tag: Tag.VERSION_MIN, name: 'versionMin', kind: 'u32', required: true },
    { tag: Tag.VERSION_MAX, name: 'versionMax', kind: 'u32', required: true },
    { tag: Tag.CLIENT, name: 'client', kind: 'str', required: true },
    { tag: Tag.PID, name: 'pid', kind: 'u32', required: true },
  ],
  HELLO_OK: [
    { tag: Tag.VERSION, name: 'version', kind: 'u32', required: true },
    { tag: Tag.SERVER, name: 'server', kind: 'str', required: true },
  ],
  LIST: [],
  LIST_OK: [{ tag: Tag.TOKEN, name: 'tokens', kind: 'nested', repeated: true, fields: TOKEN_FIELDS }],
  SIGN: [
    { tag: Tag.TENANT, name: 'tenant', kind: 'str', required: true },
    { tag: Tag.KEY_ID, name: 'keyId', kind: 'bytes', required: true, minBytes: 1, maxBytes: 64 },
    { tag: Tag.ALGORITHM, name: 'algorithm', kind: 'str', required: true },
    { tag: Tag.DIGEST, name: 'digest', kind: 'bytes', required: true },
    // Version 2: the message itself, for pure Ed25519 (DIGEST is then its SHA-512, what the records name).
    { tag: Tag.DATA, name: 'data', kind: 'bytes', minBytes: 1 },
    { tag: Tag.CTX_PROJECT, name: 'project', kind: 'str' },
    { tag: Tag.CTX_ENVIRONMENT, name: 'environment', kind: 'str' },
    { tag: Tag.CTX_ARTIFACT_TYPE, name: 'artifactType', kind: 'str' },
    { tag: Tag.CTX_ARTIFACT_VERSION, name: 'artifactVersion', kind: 'str' },
    { tag: Tag.CTX_SBOM_PATH, name: 'sbomPath', kind: 'str' },
  ],
  SIGN_OK: [
    { tag: Tag.SIGNATURE, name: 'signature', kind: 'bytes', required: true },
    { tag: Tag.REQUEST_ID, name: 'requestId', kind: 'str' },
  ],
  SIGN_PENDING: [
    { tag: Tag.REQUEST_ID, name: 'requestId', kind: 'str', required: true },
    { tag: Tag.STATUS_TEXT, name: 'status', kind: 'str', required: true },
    { tag: Tag.MESSAGE, name: 'message', kind: 'str', required: true },
    { tag: Tag.CONSOLE_URL, name: 'consoleUrl', kind: 'str' },
  ],
  POLL: [
    { tag: Tag.TENANT, name: 'tenant', kind: 'str', required: true },
    { tag: Tag.REQUEST_ID, name: 'requestId', kind: 'str', required: true },
    { tag: Tag.DIGEST, name: 'digest', kind: 'bytes', required: true },
  ],
  IMPORT_CERTIFICATES: [
    { tag: Tag.TENANT, name: 'tenant', kind: 'str', required: true },
    { tag: Tag.CERTIFICATE, name: 'certificate', kind: 'bytes', required: true, minBytes: 1 },
    { tag: Tag.CHAIN_CERTIFICATE, name: 'chain', kind: 'bytes', repeated: true, minBytes: 1 },
  ],
  IMPORT_OK: [
    { tag: Tag.KEY_ID, name: 'keyId', kind: 'bytes', required: true, minBytes: 1, maxBytes: 64 },
    { tag: Tag.KEY_LABEL, name: 'label', kind: 'str', required: true },
    { tag: Tag.MESSAGE, name: 'message', kind: 'str', required: true },
  ],
  ERROR: [
    { tag: Tag.STATUS, name: 'status', kind: 'u32', required: true },
    { tag: Tag.MESSAGE, name: 'message', kind: 'str', required: true },
    { tag: Tag.REQUEST_ID, name: 'requestId', kind: 'str' },
  ],
};

const BY_TYPE = new Map<number, MessageName>(
  (Object.keys(MessageType) as MessageName[]).map((name) => [MessageType[name], name]),
);

export function messageNameOf(type: number): MessageName | undefined {
  return BY_TYPE.get(type);
}
