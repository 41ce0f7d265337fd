// KMS's read-only key operations: DescribeKey, GetPublicKey, ListKeys, ListAliases. A tenant is an account with one
// alias (alias/<tenant>, its current key) and one KMS key per key version; lists show the caller's own tenant.

import { aliasArn, keyArn } from '../../../kms-api/key-ids.js';
import { keyMetadata, publicKeyAnswer } from '../../../kms-api/key-metadata.js';
import type { SigningService } from '../../../signing/signing-service.js';
import { AwsJsonError } from './errors.js';
import { callerTenant, resolveKey } from './key-resolver.js';
import type { KmsCall, KmsOperation, KmsResult } from './operation.js';
import { grantTokens, optionalInteger, optionalString, requiredString } from './request-fields.js';

type KeyOperation = 'DescribeKey' | 'GetPublicKey' | 'ListKeys' | 'ListAliases';

/** ListKeys' and ListAliases' page: Limit 1 to 1000, default 100; the marker is the offset of the next page. */
function page<T>(items: T[], call: KmsCall): { slice: T[]; next: Record<string, unknown> } {
  const limit = optionalInteger(call.input, 'Limit', 1, 1000) ?? 100;
  const marker = optionalString(call.input, 'Marker', 320);
  if (marker !== undefined && !/^\d{1,9}$/.test(marker)) {
    throw new AwsJsonError('InvalidMarkerException', 'the Marker is not one this service returned');
  }
  const start = marker === undefined ? 0 : Number(marker);
  const slice = items.slice(start, start + limit);
  const truncated = start + limit < items.length;
  return { slice, next: truncated ? { Truncated: true, NextMarker: String(start + limit) } : { Truncated: false } };
}

export function keyOperations(signing: SigningService): Record<KeyOperation, KmsOperation> {
  return {
    async DescribeKey(call: KmsCall): Promise<KmsResult> {
      const keyId = requiredString(call.input, 'KeyId');
      grantTokens(call.input);
      const { key, current } = await resolveKey(
        signing,
        call.caller,
        call.accessKeyId,
        call.region,
        keyId,
        'kms:DescribeKey',
      );
      return { body: { KeyMetadata: keyMetadata(key, current, call.region) } };
    },

    async GetPublicKey(call: KmsCall): Promise<KmsResult> {
      const keyId = requiredString(call.input, 'KeyId');
      grantTokens(call.input);
      const { key } = await resolveKey(signing, call.caller, call.accessKeyId, call.region, keyId, 'kms:GetPublicKey');
      return { body: publicKeyAnswer(key, call.region) };
    },

    async ListKeys(call: KmsCall): Promise<KmsResult> {
      const tenantId = callerTenant(call.caller, 'kms:ListKeys', call.accessKeyId);
      const keys = await signing.listKeys(tenantId);
      const { slice, next } = page(keys, call);
      return {
        body: {
          Keys: slice.map((k) => ({ KeyId: k.id, KeyArn: keyArn(call.region, tenantId, k.id) })),
          ...next,
        },
      };
    },

    async ListAliases(call: KmsCall): Promise<KmsResult> {
      const tenantId = callerTenant(call.caller, 'kms:ListAliases', call.accessKeyId);
      const keyId = optionalString(call.input, 'KeyId');
      const current = await signing.getKey(tenantId);
      // With KeyId: the aliases of that key, which is the alias only when it names the current version.
      const target =
        keyId === undefined
          ? undefined
          : await resolveKey(signing, call.caller, call.accessKeyId, call.region, keyId, 'kms:ListAliases');
      const aliases =
        target === undefined || target.current
          ? [
              {
                AliasName: `alias/${tenantId}`,
                AliasArn: aliasArn(call.region, tenantId),
                TargetKeyId: current.id,
                CreationDate: Date.parse(current.createdAt) / 1000,
                LastUpdatedDate: Date.parse(current.createdAt) / 1000,
              },
            ]
          : [];
      const { slice, next } = page(aliases, call);
      return { body: { Aliases: slice, ...next } };
    },
  };
}
