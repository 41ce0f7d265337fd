import type { Kysely, Migration } from 'kysely';

// Issue 33: AWS-format API keys for the KMS and STS endpoints (docs/kms-api.md). SigV4 is an HMAC keyed with the
// secret itself, so a hash of it cannot check a signature: the secret access key is kept sealed by the key store's
// sealer (AES-256-GCM under a key that never leaves the token) and opened in memory when a request needs it.
export const migration0024AwsCredentials: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('api_keys').addColumn('sealed_secret', 'text').execute();
  },
};
