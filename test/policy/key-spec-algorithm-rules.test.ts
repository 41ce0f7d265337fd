// The policy's key-spec and algorithm rules (docs/policy.md): `keySpecs` and `algorithms` allow and deny lists in
// AWS KMS's names, the two newest key specs and the Ed25519 algorithms included; a name the code does not know is
// refused when the file is read, not silently never matched.
import { describe, expect, it } from 'vitest';
import type { PolicyInput } from '../../src/policy/policy.js';
import { PolicyFileError, parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';

const POLICY = `
version: 1
rules:
  keySpecs: { deny: [ECC_SECG_P256K1] }
tenants:
  release-ed:
    algorithms: { deny: [ED25519_SHA_512] }
  wallet:
    keySpecs: { allow: [ECC_SECG_P256K1] }
`;

const engine = new RulesPolicyEngine(parsePolicyDocument(POLICY, 'test'));
const ask = (input: Partial<PolicyInput> & Pick<PolicyInput, 'tenantId' | 'keySpec' | 'algorithm'>) =>
  engine.evaluate({ keyId: 'k', callerId: 'c', ...input });

describe('keySpecs and algorithms rules', () => {
  it('denies pure Ed25519 for a tenant that allows only Ed25519ph', async () => {
    const pure = await ask({ tenantId: 'release-ed', keySpec: 'ECC_NIST_EDWARDS25519', algorithm: 'ED25519_SHA_512' });
    expect(pure).toMatchObject({
      outcome: 'deny',
      rule: 'algorithm-lists',
      reason: 'algorithm "ED25519_SHA_512" is on the deny list',
    });
    const prehashed = await ask({
      tenantId: 'release-ed',
      keySpec: 'ECC_NIST_EDWARDS25519',
      algorithm: 'ED25519_PH_SHA_512',
    });
    expect(prehashed.outcome).toBe('allow');
  });

  it('keeps secp256k1 to the tenant that allows it, and that tenant to secp256k1', async () => {
    expect(await ask({ tenantId: 'acme', keySpec: 'ECC_SECG_P256K1', algorithm: 'ECDSA_SHA_256' })).toMatchObject({
      outcome: 'deny',
      rule: 'key-spec-lists',
      reason: 'key spec "ECC_SECG_P256K1" is on the deny list',
    });
    expect((await ask({ tenantId: 'wallet', keySpec: 'ECC_SECG_P256K1', algorithm: 'ECDSA_SHA_256' })).outcome).toBe(
      'allow',
    );
    expect(await ask({ tenantId: 'wallet', keySpec: 'ECC_NIST_P256', algorithm: 'ECDSA_SHA_256' })).toMatchObject({
      outcome: 'deny',
      rule: 'key-spec-lists',
      reason: 'key spec "ECC_NIST_P256" is not on the allow list (ECC_SECG_P256K1)',
    });
    expect((await ask({ tenantId: 'acme', keySpec: 'ECC_NIST_P256', algorithm: 'ECDSA_SHA_256' })).outcome).toBe(
      'allow',
    );
  });

  it('refuses a name the service does not know, and one both allowed and denied', () => {
    expect(() => parsePolicyDocument('version: 1\nrules:\n  algorithms: { deny: [ED25519] }\n', 'p.yaml')).toThrow(
      PolicyFileError,
    );
    expect(() => parsePolicyDocument('version: 1\nrules:\n  algorithms: { deny: [ED25519] }\n', 'p.yaml')).toThrow(
      /p\.yaml: \/rules\/algorithms\/deny: ED25519 unknown \(one of .*ED25519_PH_SHA_512/,
    );
    expect(() =>
      parsePolicyDocument('version: 1\ntenants:\n  t:\n    keySpecs: { allow: [SECP256K1] }\n', 'p.yaml'),
    ).toThrow(/\/tenants\/t\/keySpecs\/allow: SECP256K1 unknown \(one of .*ECC_SECG_P256K1/);
    expect(() =>
      parsePolicyDocument(
        'version: 1\nrules:\n  keySpecs: { allow: [ECC_SECG_P256K1], deny: [ECC_SECG_P256K1] }\n',
        'p.yaml',
      ),
    ).toThrow(/keySpecs: ECC_SECG_P256K1 both allowed and denied/);
  });
});
