// Typed messages of the wire protocol (version 2; version 1 is the same without SIGN's data). Property names are those of the field table in schema.ts.

export interface Hello {
  type: 'HELLO';
  versionMin: number;
  versionMax: number;
  client: string;
  pid: number;
}
export interface HelloOk {
  type: 'HELLO_OK';
  version: number;
  server: string;
}
export interface List {
  type: 'LIST';
}
export interface WireKey {
  /** CKA_ID, 1..64 bytes. */
  keyId: Buffer;
  label: string;
  keySpec: string;
  /** SubjectPublicKeyInfo, DER. */
  publicKey: Buffer;
  /** X.509 leaf, DER. */
  certificate?: Buffer;
  /** Intermediates, leaf side first. */
  chain: Buffer[];
  /** ML-DSA keys: the raw public key (FIPS 204 encoding), the same bytes as in publicKey's BIT STRING. */
  rawPublicKey?: Buffer;
}
export interface WireToken {
  /** At most 32 bytes (CK_TOKEN_INFO.label). */
  label: string;
  tenant: string;
  keys: WireKey[];
  /** Set when this tenant failed on its own (the others are listed as usual); then there are no keys. */
  status?: number;
  /** With status: why the tenant failed. Without: why its key was left out (an SM2 key: no PKCS#11 mechanism). */
  message?: string;
}
export interface ListOk {
  type: 'LIST_OK';
  tokens: WireToken[];
}
export interface SignContext {
  project?: string;
  environment?: string;
  artifactType?: string;
  artifactVersion?: string;
  sbomPath?: string;
}
export interface Sign extends SignContext {
  type: 'SIGN';
  tenant: string;
  keyId: Buffer;
  algorithm: string;
  /** With data: the message's SHA-512, which the service records in place of the message. */
  digest: Buffer;
  /** Version 2, ED25519_SHA_512 only: the message itself, which pure Ed25519 signs (at most 4,096 bytes). */
  data?: Buffer;
}
export interface SignOk {
  type: 'SIGN_OK';
  signature: Buffer;
  requestId?: string;
}
export interface SignPending {
  type: 'SIGN_PENDING';
  requestId: string;
  /** STATUS_TEXT: pending_approval or pending_security_review. */
  status: string;
  message: string;
  /** CONSOLE_URL (optional): where a person approves the request (the service's console page for it). */
  consoleUrl?: string;
}
export interface Poll {
  type: 'POLL';
  tenant: string;
  requestId: string;
  /** The digest of the SIGN that went pending: the service releases the signature only against it. */
  digest: Buffer;
}
/**
 * Registers a certificate chain for a tenant's current key (sent by `signbridge cert import`, never by the module).
 * The daemon keeps it in its certificate folder and LIST publishes it from then on.
 */
export interface ImportCertificates {
  type: 'IMPORT_CERTIFICATES';
  tenant: string;
  /** X.509 leaf, DER: its public key must be the tenant's current key. */
  certificate: Buffer;
  /** Intermediates, leaf side first. */
  chain: Buffer[];
}
export interface ImportOk {
  type: 'IMPORT_OK';
  /** CKA_ID the module gives the key and the leaf. */
  keyId: Buffer;
  /** The service key id. */
  label: string;
  /** What was stored, for the CLI to print. */
  message: string;
}
export interface ErrorMessage {
  type: 'ERROR';
  status: number;
  message: string;
  requestId?: string;
}

export type Request = Hello | List | Sign | Poll | ImportCertificates;
export type Response = HelloOk | ListOk | SignOk | SignPending | ImportOk | ErrorMessage;
export type Message = Request | Response;

export const REQUEST_TYPES: ReadonlySet<Message['type']> = new Set([
  'HELLO',
  'LIST',
  'SIGN',
  'POLL',
  'IMPORT_CERTIFICATES',
]);
export const RESPONSE_TYPES: ReadonlySet<Message['type']> = new Set([
  'HELLO_OK',
  'LIST_OK',
  'SIGN_OK',
  'SIGN_PENDING',
  'IMPORT_OK',
  'ERROR',
]);
