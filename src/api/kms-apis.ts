// The drop-in KMS endpoints, wired: AWS KMS and STS at the root path (aws/endpoint.ts), Vault transit under
// /v1/<mount>/. app.ts calls this once; each protocol lives in its own folder (aws/: endpoint.ts, kms/, sts/; vault-transit/).
import type { FastifyInstance } from 'fastify';
import { awsRequestVerifier } from '../auth/aws-credentials/aws-request-verifier.js';
import type { TokenExchange } from '../auth/workload/token-exchange.js';
import { type KeyStore, KeyStores } from '../keys/key-store.js';
import { sealerAmong } from '../keys/sealer.js';
import type { KmsApiSettings } from '../kms-api/kms-api-settings.js';
import type { SigningService } from '../signing/signing-service.js';
import type { Store } from '../store/store.js';
import type { LogService } from '../transparency/log-service.js';
import { awsEndpointRoutes } from './aws/endpoint.js';
import { kmsHandler } from './aws/kms/kms-handler.js';
import { stsHandler } from './aws/sts/sts-handler.js';
import { rescueRefusedRequests } from './http-strict.js';
import type { ExchangeLimit } from './token-exchange-limit.js';
import { listVerbRescue } from './vault-transit/list-verb.js';
import { vaultTransitRoutes } from './vault-transit/routes.js';

export interface KmsApisOptions {
  store: Store;
  keyStore: KeyStore | KeyStores;
  signing: SigningService;
  settings: KmsApiSettings;
  /** The CI token exchange POST /oauth/token uses: STS's AssumeRoleWithWebIdentity verifies tokens the same way. */
  exchange: TokenExchange;
  now: () => Date;
  /** The service's public URL: a held call names the console page that decides it. */
  publicUrl?: string | undefined;
  /** STS calls an address may make per window, shared with POST /oauth/token (workload.exchangeLimit). */
  exchangeLimit?: ExchangeLimit | undefined;
  /** The transparency log: KMS Sign with `Prefer: wait-for-log` answers its proof in a header. */
  log?: LogService | undefined;
}

export async function registerKmsApis(app: FastifyInstance, opts: KmsApisOptions): Promise<void> {
  if (!opts.settings.enabled) return;
  const sealer = sealerAmong(KeyStores.of(opts.keyStore).stores);
  // One verifier of the AWS-format credentials for both doors that take them.
  const verifier = awsRequestVerifier(opts.store, sealer, opts.now);
  await app.register(awsEndpointRoutes, {
    kms: kmsHandler({
      store: opts.store,
      signing: opts.signing,
      verifier,
      heldWaitMs: opts.settings.heldWaitMs,
      now: opts.now,
      publicUrl: opts.publicUrl,
      log: opts.log,
    }),
    sts: stsHandler({
      store: opts.store,
      sealer,
      exchange: opts.exchange,
      verifier,
      now: opts.now,
      ...(opts.exchangeLimit && { limit: opts.exchangeLimit }),
    }),
  });
  const vaultPrefix = `/v1/${opts.settings.vaultMount}`;
  await app.register(vaultTransitRoutes, {
    prefix: vaultPrefix,
    store: opts.store,
    signing: opts.signing,
    heldWaitMs: opts.settings.heldWaitMs,
    now: opts.now,
    publicUrl: opts.publicUrl,
  });
  rescueRefusedRequests(app, listVerbRescue(app, vaultPrefix));
}
