import { ApiError } from '../errors.js';

const BASE64_ANY = /^[A-Za-z0-9+/_-]*={0,2}$/;

/**
 * Decodes base64 in either alphabet (standard or URL-safe), padded or not. The contract's samples use
 * URL-safe with padding while most tools emit standard base64, so both are accepted; anything else is a 400
 * that names the field.
 */
export function decodeBase64Field(field: string, value: string): Buffer {
  if (!BASE64_ANY.test(value)) {
    throw new ApiError('invalid_hash', `${field} is not base64 (standard or URL-safe alphabet)`);
  }
  const unpadded = value.replace(/=+$/, '');
  if (unpadded.length % 4 === 1 || (value.length !== unpadded.length && value.length % 4 !== 0)) {
    throw new ApiError('invalid_hash', `${field} has an invalid base64 length or padding`);
  }
  const bytes = Buffer.from(unpadded.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
  if (bytes.length === 0) {
    throw new ApiError('invalid_hash', `${field} is empty`);
  }
  return bytes;
}

/** DigestInfo prefixes (RFC 8017 section 9.2 note 1) for PKCS#1 v1.5 over a pre-computed digest. */
export const DIGEST_INFO_PREFIX = {
  sha256: Buffer.from('3031300d060960864801650304020105000420', 'hex'),
  sha384: Buffer.from('3041300d060960864801650304020205000430', 'hex'),
  sha512: Buffer.from('3051300d060960864801650304020305000440', 'hex'),
} as const;
