// The OpenAPI document names every key spec and signing algorithm the code knows (src/crypto/algorithms.ts), AWS
// KMS's twelve with ECC_NIST_EDWARDS25519 and ECC_SECG_P256K1 among them, wherever a request or a response carries
// one: the enums come from the same tables, and this fails when a schema keeps a list of its own.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { KEY_SPECS, SIGNING_ALGORITHMS } from '../../src/crypto/algorithms.js';
import { startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
// biome-ignore lint/suspicious/noExplicitAny: an OpenAPI document is untyped JSON
let doc: any;
beforeAll(async () => {
  svc = await startTestService();
  const res = await svc.app.inject({ method: 'GET', url: '/api/openapi.yml' });
  expect(res.statusCode).toBe(200);
  doc = YAML.parse(res.body);
});
afterAll(async () => svc?.close());

/** Every enum of a property named `name` anywhere under `node`, with where it was found. */
function enumsOf(node: unknown, name: string, path = '$', found: Array<[string, unknown[]]> = []) {
  if (node === null || typeof node !== 'object') return found;
  for (const [key, value] of Object.entries(node)) {
    const at = `${path}.${key}`;
    if (key === name && value && typeof value === 'object') {
      const v = value as { enum?: unknown[]; items?: { enum?: unknown[] } };
      const values = v.enum ?? v.items?.enum;
      if (values) found.push([at, values]);
    }
    enumsOf(value, name, at, found);
  }
  return found;
}

const requestOf = (action: string) =>
  doc.paths[`/v1/${action}`].post.requestBody.content['application/json'].schema.properties;

describe('OpenAPI enums of key specs and algorithms', () => {
  it('create_tenant, rotate_key and get_import_params take every key spec, the two newest included', () => {
    expect(KEY_SPECS).toEqual(expect.arrayContaining(['ECC_NIST_EDWARDS25519', 'ECC_SECG_P256K1']));
    for (const action of ['create_tenant', 'rotate_key', 'get_import_params']) {
      expect(requestOf(action).key_spec.enum, action).toEqual([...KEY_SPECS]);
    }
  });

  it('sign takes every signing algorithm, ED25519_SHA_512 and ED25519_PH_SHA_512 included', () => {
    expect(SIGNING_ALGORITHMS).toEqual(expect.arrayContaining(['ED25519_SHA_512', 'ED25519_PH_SHA_512']));
    expect(requestOf('sign').algorithm.enum).toEqual([...SIGNING_ALGORITHMS]);
  });

  it('no key_spec or algorithm list in the document is shorter than the code tables', () => {
    const specs = enumsOf(doc, 'key_spec');
    expect(specs.length).toBeGreaterThan(3);
    for (const [at, values] of specs) expect(values, at).toEqual([...KEY_SPECS]);
    // The trial endpoint signs with its one RSA test key only (docs/api.md#trial-endpoint).
    const algorithms = ['algorithm', 'signing_algorithm', 'signing_algorithms']
      .flatMap((name) => enumsOf(doc, name))
      .filter(([at]) => !at.includes('/trial/'));
    expect(algorithms.length, JSON.stringify(algorithms.map(([at]) => at))).toBeGreaterThan(1);
    for (const [at, values] of algorithms) expect(values, at).toEqual([...SIGNING_ALGORITHMS]);
  });
});
