// The wire protocol between libsignbridge-pkcs11.so and the daemon: the numbers of docs/wire-protocol.md, in one
// place. Nothing else in the daemon spells a tag or a type byte.

/** The newest version this side speaks; HELLO negotiates the highest both sides speak. */
export const PROTOCOL_VERSION = 2;
/** The oldest version this side still speaks: version 1 is version 2 without messages to sign (SIGN's DATA). */
export const PROTOCOL_VERSION_MIN = 1;
/** The first version whose SIGN may carry DATA, the message itself (pure Ed25519, CKM_EDDSA). */
export const MESSAGE_SIGNING_VERSION = 2;

/** Largest value of a frame's length field (type byte + body). */
export const MAX_FRAME_LENGTH = 1024 * 1024;
/** u32 length + u8 type. */
export const FRAME_HEADER_BYTES = 5;
/** u16 tag + u32 length. */
export const FIELD_HEADER_BYTES = 6;

export const MessageType = {
  HELLO: 0x01,
  LIST: 0x02,
  SIGN: 0x03,
  POLL: 0x04,
  IMPORT_CERTIFICATES: 0x05,
  ERROR: 0x7f,
  HELLO_OK: 0x81,
  LIST_OK: 0x82,
  SIGN_OK: 0x83,
  SIGN_PENDING: 0x84,
  IMPORT_OK: 0x85,
} as const;
export type MessageName = keyof typeof MessageType;

export const Tag = {
  VERSION_MIN: 0x0001,
  VERSION_MAX: 0x0002,
  CLIENT: 0x0003,
  PID: 0x0004,
  VERSION: 0x0005,
  SERVER: 0x0006,
  TOKEN: 0x0010,
  TOKEN_LABEL: 0x0011,
  TENANT: 0x0012,
  KEY: 0x0013,
  KEY_ID: 0x0014,
  KEY_LABEL: 0x0015,
  KEY_SPEC: 0x0016,
  PUBLIC_KEY: 0x0017,
  CERTIFICATE: 0x0018,
  CHAIN_CERTIFICATE: 0x0019,
  RAW_PUBLIC_KEY: 0x001a,
  ALGORITHM: 0x0020,
  DIGEST: 0x0021,
  SIGNATURE: 0x0022,
  REQUEST_ID: 0x0023,
  STATUS_TEXT: 0x0024,
  MESSAGE: 0x0025,
  STATUS: 0x0026,
  CONSOLE_URL: 0x0027,
  DATA: 0x0028,
  CTX_PROJECT: 0x0030,
  CTX_ENVIRONMENT: 0x0031,
  CTX_ARTIFACT_TYPE: 0x0032,
  CTX_ARTIFACT_VERSION: 0x0033,
  CTX_SBOM_PATH: 0x0034,
} as const;

/** ERROR.STATUS values. */
export const WireStatus = {
  BAD_REQUEST: 1,
  KEY_NOT_FOUND: 2,
  UNAUTHENTICATED: 3,
  POLICY_DENIED: 4,
  UNAVAILABLE: 5,
  TIMEOUT: 6,
  INTERNAL: 7,
  ALGORITHM_INVALID: 8,
  REJECTED: 9,
  EXPIRED: 10,
  VERSION_UNSUPPORTED: 11,
  FORBIDDEN: 12,
  KEY_CHANGED: 13,
} as const;
export type WireStatusName = keyof typeof WireStatus;
export type WireStatusCode = (typeof WireStatus)[WireStatusName];

export function wireStatusName(code: number): string {
  const found = (Object.keys(WireStatus) as WireStatusName[]).find((k) => WireStatus[k] === code);
  return found ?? `STATUS_${code}`;
}

/**
 * A broken frame: the receiver closes the connection without answering and never tries to resynchronise.
 * (A well-formed request the daemon cannot serve is answered with ERROR instead.)
 */
export class ProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ProtocolError';
  }
}
