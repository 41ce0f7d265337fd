// OpenSSL with the libp11 engine through the module, against the real daemon and service: the configuration from
// `signbridge openssl-config --engine`, then the same signatures as with pkcs11-provider (openssl-provider.test.ts)
// with `-engine pkcs11 -keyform engine`. The commands are the snippets of docs/clients.md.
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

opensslSuite('OpenSSL + libp11 engine', () => stack, {
  config: 'openssl-engine-config',
  publicKey: 'openssl-engine-public-key',
  dgst: 'openssl-engine-dgst',
  dgstPss: 'openssl-engine-dgst-pss',
  pkeyutl: 'openssl-engine-pkeyutl',
  reqX509: 'openssl-engine-req-x509',
  cms: 'openssl-engine-cms',
});
