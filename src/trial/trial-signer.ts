// The trial endpoint's signer: a published RSA-2048 test key (assets/), PKCS#1 v1.5 over a SHA-256 digest.
// It is deliberately separate from every KeyStore, so no production route can reach it.
import { constants, createPrivateKey, type KeyObject, privateEncrypt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { DIGEST_INFO_PREFIX } from '../crypto/encoding.js';
import { packagePath } from '../paths.js';

export const TRIAL_KEY_PATH = packagePath('assets', 'trial-rsa2048.TEST-ONLY-PUBLISHED-KEY.pem');
export const TRIAL_MOCK_SIGNATURE = 'TRIAL_MOCK_SIG_NOT_CRYPTOGRAPHICALLY_VALID';

export class TrialSigner {
  private readonly key: KeyObject;

  constructor(pem = readFileSync(TRIAL_KEY_PATH, 'utf8')) {
    this.key = createPrivateKey(pem);
  }

  /** Hex RSASSA-PKCS1-v1_5 signature of a SHA-256 digest (512 hex characters for the 2048-bit key). */
  signSha256(digest: Buffer): string {
    if (digest.length !== 32) throw new Error('digest must be 32 bytes');
    return privateEncrypt(
      { key: this.key, padding: constants.RSA_PKCS1_PADDING },
      Buffer.concat([DIGEST_INFO_PREFIX.sha256, digest]),
    ).toString('hex');
  }
}
