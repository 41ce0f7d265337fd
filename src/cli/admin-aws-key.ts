// `admin api-key create --format aws`: an API key for AWS clients (the KMS endpoint, docs/kms-api.md), printed as a
// section of the AWS shared credentials file. Its secret is sealed by the key store's sealer, so this command opens
// the key store (the service's PKCS#11 token) beside the store, briefly.

import { createAwsApiKey, NO_SEALER } from '../auth/aws-credentials/aws-credentials.js';
import { sharedCredentialsSection } from '../auth/aws-credentials/credential-format.js';
import type { ServiceConfig } from '../config/config.js';
import type { EventBuilder } from '../events/event-builder.js';
import { sealerAmong } from '../keys/sealer.js';
import { openKeyStore } from '../open-stores.js';
import type { Role } from '../store/records/roles.js';
import type { Store } from '../store/store.js';

export interface AwsKeyRequest {
  role: Role;
  tenantId: string | null;
  label: string;
  /** The credentials file section's name (AWS_PROFILE). */
  profile: string;
  events: EventBuilder;
  by: string;
}

export interface AwsKeyMade {
  id: string;
  accessKeyId: string;
  /** What goes to stdout: the credentials section, shown once. */
  section: string;
}

export class NoSealerError extends Error {}

export async function createAwsKeyFromCli(
  store: Store,
  config: ServiceConfig,
  req: AwsKeyRequest,
): Promise<AwsKeyMade> {
  const keyStores = openKeyStore(config);
  try {
    const sealer = sealerAmong(keyStores.stores);
    if (!sealer) throw new NoSealerError(NO_SEALER);
    const made = await createAwsApiKey(store, sealer, req.role, req.tenantId, req.label, new Date(), {
      events: req.events,
      by: req.by,
    });
    return {
      id: made.record.id,
      accessKeyId: made.accessKeyId,
      section: sharedCredentialsSection(req.profile, made.accessKeyId, made.secretAccessKey),
    };
  } finally {
    await keyStores.close();
  }
}
