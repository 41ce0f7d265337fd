// The native ML-DSA signer (src/keys/native/ml-dsa, OpenSSL inside Node 24) against the two independent checks:
// noble verifies and reproduces its signatures byte for byte (same rnd), and node:crypto (OpenSSL's own verifier)
// accepts them as signatures of the message μ stands for. Then the software key store: it signs with the addon on
// its threads and on the event loop, and where the addon cannot load it signs with noble and says so once.

import { execFileSync } from 'node:child_process';
import { createPublicKey, randomBytes, verify } from 'node:crypto';
import { existsSync, rmSync } from 'node:fs';
import { ml_dsa44, ml_dsa65, ml_dsa87 } from '@noble/post-quantum/ml-dsa.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { mlDsaMu } from '../../src/crypto/message-representatives.js';
import { type MlDsaLevel, verifyMlDsa } from '../../src/crypto/ml-dsa-verify.js';
import { mlDsaSpkiDer, parseMlDsaSpki } from '../../src/crypto/spki.js';
import { Pkcs11KeyStore } from '../../src/keys/pkcs11/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from '../../src/keys/pkcs11/softhsm.js';
import { loadMlDsaAddon, ML_DSA_ADDON_PATH, type MlDsaAddon } from '../../src/keys/software/ml-dsa-addon.js';
import { SoftwareKeyStore } from '../../src/keys/software/software-key-store.js';
import { packagePath } from '../../src/paths.js';
import { makeTempDir } from '../helpers/service.js';

const NOBLE = { 44: ml_dsa44, 65: ml_dsa65, 87: ml_dsa87 } as const;
const LEVELS: MlDsaLevel[] = [44, 65, 87];
const SPEC: Record<MlDsaLevel, KeySpec> = { 44: 'ML_DSA_44', 65: 'ML_DSA_65', 87: 'ML_DSA_87' };
const NODE_MAJOR = Number(process.versions.node.split('.')[0]);
/** Node 24 carries OpenSSL 3.5 (ML-DSA); Node 20's 3.0 has none, and there the addon must not load. */
const NATIVE = NODE_MAJOR >= 24;

beforeAll(() => {
  if (!existsSync(ML_DSA_ADDON_PATH)) {
    execFileSync('bash', [packagePath('src', 'keys', 'native', 'ml-dsa', 'build.sh')], { stdio: 'inherit' });
  }
});

/** node:crypto's verdict: pure ML-DSA of `message` with the empty context, which is what μ was computed from. */
function opensslVerifies(level: MlDsaLevel, publicKey: Uint8Array, message: Buffer, signature: Buffer): boolean {
  const key = createPublicKey({ key: mlDsaSpkiDer(SPEC[level], Buffer.from(publicKey)), format: 'der', type: 'spki' });
  return verify(null, message, key, signature);
}

describe.runIf(NATIVE)('the addon on Node 24', () => {
  let addon: MlDsaAddon;
  beforeAll(() => {
    const load = loadMlDsaAddon();
    if (!load.addon) throw new Error(`the addon did not load: ${load.reason}`);
    expect(load.openssl).toMatch(/^OpenSSL 3\.([5-9]|\d\d)/);
    addon = load.addon;
  });

  for (const level of LEVELS) {
    it(`ML-DSA-${level}: signatures of μ verify with noble and with node:crypto, and only for their message`, () => {
      const { secretKey, publicKey } = NOBLE[level].keygen(randomBytes(32));
      const message = Buffer.from(`an artifact for ML-DSA-${level}\n`);
      const mu = mlDsaMu(publicKey, [message]);
      const signature = addon.signMu(level, secretKey, mu);
      expect(signature).toHaveLength(NOBLE[level].lengths.signature as number);
      expect(NOBLE[level].internal.verify(signature, mu, publicKey, { externalMu: true })).toBe(true);
      expect(verifyMlDsa(level, publicKey, { message }, signature)).toBe(true);
      expect(opensslVerifies(level, publicKey, message, signature)).toBe(true);
      const other = Buffer.from('another artifact\n');
      expect(opensslVerifies(level, publicKey, other, signature)).toBe(false);
      expect(
        NOBLE[level].internal.verify(signature, mlDsaMu(publicKey, [other]), publicKey, { externalMu: true }),
      ).toBe(false);
    });

    it(`ML-DSA-${level}: the same bytes as noble for the same rnd, hedged by default, deterministic on request`, () => {
      const { secretKey } = NOBLE[level].keygen(randomBytes(32));
      const mu = randomBytes(64);
      const rnd = randomBytes(32);
      const withRnd = addon.signMu(level, secretKey, mu, { testEntropy: rnd });
      const nobleWithRnd = NOBLE[level].internal.sign(mu, secretKey, { externalMu: true, extraEntropy: rnd });
      expect(withRnd.equals(Buffer.from(nobleWithRnd))).toBe(true);
      const deterministic = addon.signMu(level, secretKey, mu, { deterministic: true });
      const nobleDeterministic = NOBLE[level].internal.sign(mu, secretKey, { externalMu: true, extraEntropy: false });
      expect(deterministic.equals(Buffer.from(nobleDeterministic))).toBe(true);
      expect(addon.signMu(level, secretKey, mu, { deterministic: true }).equals(deterministic)).toBe(true);
      // Hedged, as the noble path is (fresh rnd): two signatures of one μ differ.
      expect(addon.signMu(level, secretKey, mu).equals(addon.signMu(level, secretKey, mu))).toBe(false);
    });
  }

  it('refuses a μ, a key or a level of the wrong size with a RangeError that says which', () => {
    const { secretKey } = ml_dsa65.keygen(randomBytes(32));
    expect(() => addon.signMu(65, secretKey, randomBytes(32))).toThrow(
      expect.objectContaining({ name: 'RangeError', message: 'signMu: mu is 64 bytes, not 32' }),
    );
    expect(() => addon.signMu(65, secretKey, randomBytes(65))).toThrow('signMu: mu is 64 bytes, not 65');
    expect(() => addon.signMu(44, secretKey, randomBytes(64))).toThrow(
      'signMu: an ML-DSA-44 secret key is 2560 bytes, not 4032',
    );
    expect(() => addon.signMu(66 as MlDsaLevel, secretKey, randomBytes(64))).toThrow(
      'signMu: the level is 44, 65 or 87',
    );
    expect(() => addon.signMu(65, secretKey, randomBytes(64), { testEntropy: randomBytes(31) })).toThrow(
      'signMu: testEntropy is 32 bytes',
    );
  });

  it('refuses a secret key that is not one (OpenSSL rejects the encoding), naming OpenSSL', () => {
    const garbage = new Uint8Array(4032).fill(0xff);
    expect(() => addon.signMu(65, garbage, randomBytes(64))).toThrow(/^OpenSSL importing the secret key failed/);
  });
});

describe.runIf(!NATIVE)('the addon on Node 20', () => {
  it('does not load (OpenSSL 3.0 has no ML-DSA), and says why instead of throwing', () => {
    const load = loadMlDsaAddon();
    expect(load.addon).toBeUndefined();
    expect(load).toMatchObject({
      reason: expect.stringMatching(/does not load on Node 20.*EVP_PKEY_sign_message_init/),
    });
  });
});

describe('the software key store', () => {
  let dir: string;
  let token: Pkcs11KeyStore;
  beforeAll(() => {
    dir = makeTempDir('sb-ml-dsa-addon-');
    token = Pkcs11KeyStore.open(embeddedSoftHsmOptions(dir));
  });
  afterAll(async () => {
    await token?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function signsAndVerifies(store: SoftwareKeyStore): Promise<void> {
    for (const level of LEVELS) {
      const key = await store.createKey(SPEC[level], 'addon');
      const der = Buffer.from(key.publicKeyPem.replace(/-----[^-]+-----|\s/g, ''), 'base64');
      const publicKey = parseMlDsaSpki(der)?.publicKey as Buffer;
      const message = Buffer.from(`signed by the key store, ML-DSA-${level}\n`);
      const signatures = await Promise.all(
        [1, 2, 3].map(() => store.sign(key.keyRef, SPEC[level], 'ML_DSA_SHAKE_256', mlDsaMu(publicKey, [message]))),
      );
      for (const signature of signatures) {
        expect(verifyMlDsa(level, publicKey, { message }, signature), `ML-DSA-${level}`).toBe(true);
        if (NATIVE) expect(opensslVerifies(level, publicKey, message, signature), `ML-DSA-${level}`).toBe(true);
      }
    }
  }

  for (const signThreads of [2, 0]) {
    const where = signThreads ? 'on its signing threads' : 'on the event loop';
    it(`signs ${where} with ${NATIVE ? 'the addon' : 'noble'}; the one line only where it falls back`, async () => {
      const notes: string[] = [];
      const store = new SoftwareKeyStore(token, 'test token', { signThreads, note: (line) => notes.push(line) });
      try {
        await signsAndVerifies(store);
        expect(store.mlDsaSigner.addon !== undefined).toBe(NATIVE);
        expect(notes).toHaveLength(NATIVE ? 0 : 1);
      } finally {
        await store.close();
      }
    });

    it(`without the addon, signs ${where} with noble and says why in one line`, async () => {
      const notes: string[] = [];
      const missing = `${dir}/no-such-addon.node`;
      const store = new SoftwareKeyStore(token, 'test token', {
        signThreads,
        mlDsaAddonPath: missing,
        note: (line) => notes.push(line),
      });
      try {
        await signsAndVerifies(store);
        expect(store.mlDsaSigner.addon).toBeUndefined();
        expect(notes).toEqual([
          `ML-DSA signs with @noble/post-quantum (pure JavaScript, several times slower than OpenSSL): the native signer is unavailable: ${missing} is not built (bash src/keys/native/ml-dsa/build.sh)`,
        ]);
      } finally {
        await store.close();
      }
    });
  }

  it('a wrong μ length is refused on the threads with the addon’s message, and the thread signs on', async () => {
    const store = new SoftwareKeyStore(token, 'test token', { signThreads: 1, note: () => {} });
    try {
      const key = await store.createKey('ML_DSA_65', 'short mu');
      const refused = store.sign(key.keyRef, 'ML_DSA_65', 'ML_DSA_SHAKE_256', randomBytes(32));
      await expect(refused).rejects.toThrow(NATIVE ? 'signMu: mu is 64 bytes, not 32' : /mu/);
      const der = Buffer.from(key.publicKeyPem.replace(/-----[^-]+-----|\s/g, ''), 'base64');
      const publicKey = parseMlDsaSpki(der)?.publicKey as Buffer;
      const message = Buffer.from('after the refusal\n');
      const signature = await store.sign(key.keyRef, 'ML_DSA_65', 'ML_DSA_SHAKE_256', mlDsaMu(publicKey, [message]));
      expect(verifyMlDsa(65, publicKey, { message }, signature)).toBe(true);
    } finally {
      await store.close();
    }
  });
});
