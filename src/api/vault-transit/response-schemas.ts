// The answers of the Vault transit routes as Vault shapes them (`data` holds the result, `errors` the refusal), for
// the response serialiser and the OpenAPI document.
import { Type } from '@sinclair/typebox';
import { LOG_INDEX_HEADERS } from '../responses.js';

const reference = Type.Optional(Type.String({ description: "the batch item's reference, echoed" }));
const error = Type.Optional(Type.String({ description: 'why this item failed (the others stand)' }));

export const VaultErrorResponse = Type.Object(
  { errors: Type.Array(Type.String()) },
  { title: 'VaultErrorResponse', description: "Vault's error shape" },
);

export const VaultSignResponse = Type.Object(
  {
    data: Type.Object({
      signature: Type.Optional(Type.String({ description: 'vault:v<N>:<base64>' })),
      key_version: Type.Optional(Type.Integer({ description: 'N: the version of the tenant key that signed' })),
      batch_results: Type.Optional(
        Type.Array(
          Type.Object({
            signature: Type.Optional(Type.String()),
            key_version: Type.Optional(Type.Integer()),
            log_index: Type.Optional(
              Type.Integer({ minimum: 0, description: 'signbridge: what Signbridge-Log-Index says for one input' }),
            ),
            error,
            reference,
          }),
        ),
      ),
    }),
  },
  { title: 'VaultSignResponse' },
);

export const VaultVerifyResponse = Type.Object(
  {
    data: Type.Object({
      valid: Type.Optional(Type.Boolean()),
      batch_results: Type.Optional(Type.Array(Type.Object({ valid: Type.Optional(Type.Boolean()), error, reference }))),
    }),
  },
  { title: 'VaultVerifyResponse' },
);

const KeyVersion = Type.Object({
  name: Type.String({ description: 'the curve (ECDSA) or the key type' }),
  public_key: Type.String({ description: 'SubjectPublicKeyInfo, PEM' }),
  creation_time: Type.String({ format: 'date-time' }),
});

export const VaultKeyResponse = Type.Object(
  {
    data: Type.Object({
      name: Type.String(),
      type: Type.String({ description: 'rsa-2048/3072/4096, ecdsa-p256/p384/p521, mldsa-44/65/87, sm2' }),
      keys: Type.Record(Type.String(), KeyVersion, { description: 'every version, by number' }),
      latest_version: Type.Integer(),
      min_available_version: Type.Integer(),
      min_decryption_version: Type.Integer(),
      min_encryption_version: Type.Integer(),
      supports_signing: Type.Boolean(),
      supports_encryption: Type.Boolean(),
      supports_decryption: Type.Boolean(),
      supports_derivation: Type.Boolean(),
      exportable: Type.Boolean(),
      deletion_allowed: Type.Boolean(),
      derived: Type.Boolean(),
      allow_plaintext_backup: Type.Boolean(),
      imported_key: Type.Boolean(),
      auto_rotate_period: Type.Integer(),
    }),
  },
  { title: 'VaultKeyResponse' },
);

export const VaultKeyListResponse = Type.Object(
  { data: Type.Object({ keys: Type.Array(Type.String(), { description: 'the tenants this key may read' }) }) },
  { title: 'VaultKeyListResponse' },
);

/** A success answer and Vault's error answers, each described. */
export function vaultResponses(ok: object, description: string, withLogIndex = false) {
  const failure = (text: string) => ({ ...VaultErrorResponse, description: text });
  return {
    200: { description, ...ok, ...(withLogIndex && { headers: LOG_INDEX_HEADERS }) },
    400: failure('invalid request, unknown key, a held request still waiting (names it and where to approve it)'),
    403: failure('permission denied (no, unknown or revoked token; another tenant), or denied by policy'),
    404: failure('no such key (errors is empty, as Vault answers)'),
    429: failure('a velocity limit of the policy; Retry-After says when'),
    500: failure('internal error'),
    503: failure('the store or key store is unavailable; retry (Retry-After)'),
  };
}
