// A key version as KMS describes it: DescribeKey's KeyMetadata and GetPublicKey's fields. SigningAlgorithms are
// listed as AWS lists them for the key spec, in AWS's order: cosign signs with the first one (PKCS#1 v1.5 SHA-256
// for RSA). signbridge's `sign` also takes an EC key with another SHA-2 digest (docs/api.md); KMS lists only the
// curve's, and so does this, so that a client choosing from the list chooses what AWS would.

import { algorithmsForKey, type KeySpec, keyInfo, type SigningAlgorithm } from '../crypto/algorithms.js';
import { spkiDer } from '../crypto/file-representative.js';
import type { KeyRecord } from '../store/store.js';
import { keyArn } from './key-ids.js';

export function awsSigningAlgorithms(spec: KeySpec): SigningAlgorithm[] {
  const info = keyInfo(spec);
  switch (info.family) {
    case 'rsa':
      // SIGNING_ALGORITHMS is in AWS's order: PKCS#1 v1.5 SHA-256, 384, 512, then PSS.
      return algorithmsForKey(spec);
    case 'ec':
      return [`ECDSA_SHA_${info.hash.slice(3)}` as SigningAlgorithm];
    case 'ml-dsa':
      return ['ML_DSA_SHAKE_256'];
    case 'sm2':
      return ['SM2DSA'];
    case 'ed25519':
      // AWS's order for ECC_NIST_EDWARDS25519 (botocore's KMS model): pure first, then the prehashed one.
      return ['ED25519_SHA_512', 'ED25519_PH_SHA_512'];
  }
}

/** KMS's older name for the key spec; ML-DSA came after it was deprecated and has none. */
function customerMasterKeySpec(spec: KeySpec): { CustomerMasterKeySpec?: string } {
  return spec.startsWith('ML_DSA') ? {} : { CustomerMasterKeySpec: spec };
}

/** JSON 1.1 timestamps are seconds since the epoch, as a number. */
function epochSeconds(iso: string): number {
  return Date.parse(iso) / 1000;
}

/** DescribeKey's KeyMetadata. Only the tenant's current version signs; older ones are Disabled (they still verify). */
export function keyMetadata(key: KeyRecord, current: boolean, region: string): Record<string, unknown> {
  return {
    AWSAccountId: key.tenantId,
    KeyId: key.id,
    Arn: keyArn(region, key.tenantId, key.id),
    CreationDate: epochSeconds(key.createdAt),
    Enabled: current,
    Description: `signbridge tenant ${key.tenantId}, key version ${key.version}${current ? ' (current)' : ''}`,
    KeyUsage: 'SIGN_VERIFY',
    KeyState: current ? 'Enabled' : 'Disabled',
    Origin: key.origin === 'imported' ? 'EXTERNAL' : 'AWS_KMS',
    KeyManager: 'CUSTOMER',
    ...customerMasterKeySpec(key.keySpec),
    KeySpec: key.keySpec,
    SigningAlgorithms: awsSigningAlgorithms(key.keySpec),
    MultiRegion: false,
    ...(key.materialExpiresAt !== null && {
      ExpirationModel: 'KEY_MATERIAL_EXPIRES',
      ValidTo: epochSeconds(key.materialExpiresAt),
    }),
  };
}

/** GetPublicKey's answer: the DER SubjectPublicKeyInfo, base64 as JSON 1.1 sends blobs. */
export function publicKeyAnswer(key: KeyRecord, region: string): Record<string, unknown> {
  return {
    KeyId: keyArn(region, key.tenantId, key.id),
    PublicKey: spkiDer(key.publicKeyPem).toString('base64'),
    ...customerMasterKeySpec(key.keySpec),
    KeySpec: key.keySpec,
    KeyUsage: 'SIGN_VERIFY',
    SigningAlgorithms: awsSigningAlgorithms(key.keySpec),
  };
}
