// The AWS KMS key store in the configuration: the file's `keyStore: {type: aws-kms}` block, SIGNBRIDGE_KEY_STORE,
// and the legacy PKCS#11 store a move to KMS keeps behind it.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config/config.js';
import { ConfigError } from '../../src/config-error.js';
import { makeTempDir } from '../helpers/service.js';

const dir = makeTempDir('sb-kms-config-');
let n = 0;
function file(yaml: string): string {
  const path = join(dir, `c${n++}.yaml`);
  writeFileSync(path, `dataDir: ${dir}\n${yaml}`);
  return path;
}

describe('keyStore aws-kms', () => {
  it("takes its settings from the file; region, endpoint and credentials stay the SDK's unless given", () => {
    const configFile = file(
      'keyStore:\n  type: aws-kms\n  aliasPrefix: alias/sb/\n  requestTimeoutMs: 3000\n  maxAttempts: 4\n',
    );
    expect(resolveConfig({ configFile, env: {} }).keyStore).toEqual({
      type: 'aws-kms',
      aliasPrefix: 'alias/sb/',
      requestTimeoutMs: 3000,
      maxAttempts: 4,
    });
    const withRegion = file('keyStore:\n  type: aws-kms\n  region: eu-west-1\n  endpoint: https://kms.example\n');
    expect(resolveConfig({ configFile: withRegion, env: {} }).keyStore).toMatchObject({
      region: 'eu-west-1',
      endpoint: 'https://kms.example',
    });
  });

  it('SIGNBRIDGE_KEY_STORE=aws-kms moves to KMS; a PKCS#11 block of the file stays behind it as the legacy store', () => {
    expect(resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_KEY_STORE: 'aws-kms' } }).keyStore).toEqual({
      type: 'aws-kms',
    });
    const pkcs11 = file('keyStore:\n  type: pkcs11\n  module: /opt/hsm.so\n  tokenLabel: signing\n  pin: "1234"\n');
    expect(resolveConfig({ configFile: pkcs11, env: { SIGNBRIDGE_KEY_STORE: 'aws-kms' } }).keyStore).toEqual({
      type: 'aws-kms',
      legacy: { type: 'pkcs11', module: '/opt/hsm.so', tokenLabel: 'signing', pin: '1234' },
    });
    expect(resolveConfig({ configFile: pkcs11, env: {} }).keyStore.type).toBe('pkcs11');
    // The file's legacy block gets its PIN the same way a pkcs11 block does.
    const legacy = file(
      'keyStore:\n  type: aws-kms\n  legacy:\n    type: pkcs11\n    module: /m.so\n    tokenLabel: t\n',
    );
    expect(resolveConfig({ configFile: legacy, env: { SIGNBRIDGE_PKCS11_PIN: '9999' } }).keyStore).toEqual({
      type: 'aws-kms',
      legacy: { type: 'pkcs11', module: '/m.so', tokenLabel: 't', pin: '9999' },
    });
    expect(() => resolveConfig({ configFile: legacy, env: {} })).toThrow(/keyStore\.legacy\.type pkcs11 needs pin/);
  });

  it('refuses what it cannot use, naming the setting', () => {
    const bad = (env: NodeJS.ProcessEnv, configFile?: string) => () =>
      resolveConfig({ dataDir: dir, env, ...(configFile && { configFile }) });
    expect(bad({ SIGNBRIDGE_KEY_STORE: 'kms' })).toThrow(ConfigError);
    expect(bad({ SIGNBRIDGE_KEY_STORE: 'kms' })).toThrow(/SIGNBRIDGE_KEY_STORE must be aws-kms, softhsm or pkcs11/);
    expect(bad({ SIGNBRIDGE_KEY_STORE: 'pkcs11' })).toThrow(/needs a keyStore block of type pkcs11/);
    expect(bad({}, file('keyStore:\n  type: aws-kms\n  aliasPrefix: signbridge\n'))).toThrow(/aliasPrefix/);
    expect(bad({}, file('keyStore:\n  type: aws-kms\n  accessKeyId: AKIA\n'))).toThrow(ConfigError);
  });
});
