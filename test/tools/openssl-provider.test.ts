// OpenSSL 3 with pkcs11-provider through the module, against the real daemon and service: the configuration from
// `signbridge openssl-config`, then dgst, pkeyutl, req -x509 and cms for RSA (PKCS#1 v1.5 and PSS), P-256 and P-384.
// The commands are the snippets of docs/clients.md; the checks are in openssl-work.ts.
import { afterAll, beforeAll } from 'vitest';
import { type Stack, startStack } from '../module/harness.js';
import { opensslSuite, SPECS } from './openssl-work.js';

let stack: Stack;
beforeAll(async () => {
  stack = await startStack(SPECS);
});
afterAll(async () => {
  await stack?.close();
});

opensslSuite('OpenSSL 3 + pkcs11-provider', () => stack, {
  config: 'openssl-config',
  publicKey: 'openssl-public-key',
  dgst: 'openssl-dgst',
  dgstPss: 'openssl-dgst-pss',
  pkeyutl: 'openssl-pkeyutl',
  reqX509: 'openssl-req-x509',
  cms: 'openssl-cms',
});
