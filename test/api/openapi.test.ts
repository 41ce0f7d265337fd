// GET /api/openapi.yml: generated from the route schemas and valid OpenAPI 3.0.0.
import SwaggerParser from '@apidevtools/swagger-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { ACTIONS } from '../../src/store/records/roles.js';
import { startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
// biome-ignore lint/suspicious/noExplicitAny: an OpenAPI document is untyped JSON
let doc: any;
beforeAll(async () => {
  svc = await startTestService();
  const res = await svc.app.inject({ method: 'GET', url: '/api/openapi.yml' });
  expect(res.statusCode).toBe(200);
  expect(res.headers['content-type']).toContain('yaml');
  doc = YAML.parse(res.body);
});
afterAll(async () => svc?.close());

describe('OpenAPI document', () => {
  it('passes an OpenAPI validator', async () => {
    await expect(SwaggerParser.validate(structuredClone(doc))).resolves.toBeTruthy();
  });

  it('is OpenAPI 3.0.0, document version 1.0.0, with production (region variable) and local servers', () => {
    expect(doc.openapi).toBe('3.0.0');
    expect(doc.info.version).toBe('1.0.0');
    const [prod, local] = doc.servers;
    expect(prod.url).toContain('{region}');
    expect(prod.variables.region.default).toBe('us-east-1');
    expect(local.url).toMatch(/^http:\/\/(127\.0\.0\.1|localhost)/);
  });

  it('declares bearer and the SigV4-style apiKey scheme on every production operation', () => {
    const schemes = doc.components.securitySchemes;
    expect(schemes.bearerAuth).toMatchObject({ type: 'http', scheme: 'bearer' });
    expect(schemes.sigv4).toMatchObject({ type: 'apiKey', in: 'header', name: 'Authorization' });
    for (const action of ACTIONS) {
      const op = doc.paths[`/v1/${action}`]?.post;
      expect(op, action).toBeDefined();
      expect(op.security).toEqual([{ bearerAuth: [] }, { sigv4: [] }]);
      expect(op.requestBody.content['application/json'].schema).toBeDefined();
    }
    expect(doc.paths['/trial/sign'].post.security).toEqual([]);
  });

  it('documents the signing outcomes and the contract response fields', () => {
    const sign = doc.paths['/v1/sign'].post.responses;
    expect(Object.keys(sign)).toEqual(expect.arrayContaining(['200', '202', '400', '401', '403']));
    const json = JSON.stringify(doc);
    for (const field of ['tenant_created', 'public_key_pem', 'key_usage', 'vuln_id', 'fix_version', 'request_id']) {
      expect(json).toContain(field);
    }
    expect(doc.paths['/v1/create_tenant'].post.responses['201']).toBeDefined();
    // Any action may meet a store or key store that cannot serve now: 503, retry later.
    for (const path of Object.keys(doc.paths).filter((p) => p.startsWith('/v1/'))) {
      for (const [method, op] of Object.entries(doc.paths[path])) {
        // biome-ignore lint/suspicious/noExplicitAny: an OpenAPI operation is untyped JSON
        expect((op as any).responses['503'], `${method} ${path}`).toBeDefined();
      }
    }
    expect(doc.paths['/v1/:action']).toBeUndefined();
  });

  it('each operation names its own action, and the hash carries its length rule', () => {
    for (const action of ACTIONS) {
      const schema = doc.paths[`/v1/${action}`].post.requestBody.content['application/json'].schema;
      expect(schema.properties.action.enum, action).toEqual([action]);
      expect(schema.additionalProperties, action).toBe(false);
    }
    const hash = doc.paths['/v1/sign'].post.requestBody.content['application/json'].schema.properties.hash;
    const rule = new RegExp(hash.pattern);
    for (const bytes of [32, 48, 64]) {
      const digest = Buffer.alloc(bytes, 0xfb);
      for (const text of [digest.toString('base64'), digest.toString('base64url')]) expect(rule.test(text)).toBe(true);
    }
    for (const bytes of [0, 20, 31, 33, 47, 65]) expect(rule.test(Buffer.alloc(bytes).toString('base64'))).toBe(false);
    const sign = doc.paths['/v1/sign'].post.requestBody.content['application/json'].schema.properties;
    expect(sign.pss_padding).toBeUndefined();
    expect(sign.key_spec).toBeUndefined();
    expect(
      doc.paths['/v1/pkcs11_sign'].post.requestBody.content['application/json'].schema.properties.algorithm,
    ).toBeUndefined();
  });

  it('responses are named components with descriptions of their own', () => {
    for (const name of [
      'ErrorResponse',
      'SignResponse',
      'ApprovalResponse',
      'CreateTenantResponse',
      'GetPublicKeyResponse',
      'RotateKeyResponse',
      'ApproveSignResponse',
      'ExceptionRecord',
      'ExceptionListResponse',
      'TrialResponse',
    ]) {
      expect(doc.components.schemas[name], name).toBeDefined();
    }
    const ref = (path: string, status: string) =>
      doc.paths[path].post.responses[status].content['application/json'].schema.$ref;
    expect(ref('/v1/sign', '200')).toBe('#/components/schemas/SignResponse');
    expect(ref('/v1/sign', '202')).toBe('#/components/schemas/ApprovalResponse');
    expect(ref('/v1/create_tenant', '201')).toBe('#/components/schemas/CreateTenantResponse');
    expect(ref('/v1/get_public_key', '200')).toBe('#/components/schemas/GetPublicKeyResponse');
    expect(ref('/v1/get_public_key', '404')).toBe('#/components/schemas/ErrorResponse');
    expect(JSON.stringify(doc)).not.toContain('Default Response');
    expect(doc.paths['/v1/sign'].post.responses['400'].description).toContain('invalid_hash');
  });

  it('documents Signbridge-Log-Index on the answers that hand out a signature, and only there', () => {
    for (const action of ['sign', 'pkcs11_sign', 'approve_sign']) {
      const header = doc.paths[`/v1/${action}`].post.responses['200'].headers?.['Signbridge-Log-Index'];
      expect(header, action).toMatchObject({ schema: { type: 'integer', minimum: 0 } });
      expect(header.description).toMatch(/seq - 1/);
    }
    expect(doc.paths['/v1/sign'].post.responses['202'].headers).toBeUndefined();
    expect(doc.paths['/v1/get_public_key'].post.responses['200'].headers).toBeUndefined();
  });

  it('lists the Vault transit routes with their schemas and Vault-shaped errors', () => {
    const ops = {
      get: ['/v1/transit/keys', '/v1/transit/keys/{name}'],
      post: [
        '/v1/transit/sign/{name}',
        '/v1/transit/sign/{name}/{hash_algorithm}',
        '/v1/transit/verify/{name}',
        '/v1/transit/verify/{name}/{hash_algorithm}',
      ],
    };
    for (const [method, paths] of Object.entries(ops)) {
      for (const path of paths) {
        const op = doc.paths[path]?.[method];
        expect(op, `${method} ${path}`).toBeDefined();
        expect(op.tags).toEqual(['vault-transit']);
        expect(op.responses['200'].content['application/json'].schema.properties.data).toBeDefined();
        for (const status of ['400', '403', '503']) {
          expect(op.responses[status].content['application/json'].schema.properties.errors.type).toBe('array');
        }
        expect(op.parameters.some((p: { name: string }) => p.name === 'x-vault-token')).toBe(true);
      }
    }
    const sign = doc.paths['/v1/transit/sign/{name}'].post;
    const fields = sign.requestBody.content['application/json'].schema.properties;
    for (const field of ['input', 'prehashed', 'hash_algorithm', 'signature_algorithm', 'marshaling_algorithm']) {
      expect(fields[field], field).toBeDefined();
    }
    // A number or its digits (cosign's Vault signer sends "0").
    expect(fields.key_version.anyOf.map((s: { type: string }) => s.type)).toEqual(['integer', 'string']);
    expect(fields.batch_input.type).toBe('array');
    expect(sign.responses['200'].headers['Signbridge-Log-Index']).toBeDefined();
  });
});

describe('OpenAPI document: the drop-in KMS endpoint', () => {
  it('lists POST / with both AWS protocols, SigV4, and KMS-shaped errors', () => {
    const op = doc.paths['/'].post;
    expect(Object.keys(op.requestBody.content)).toEqual([
      'application/x-amz-json-1.1',
      'application/x-www-form-urlencoded',
    ]);
    expect(op.security).toEqual([{ sigv4: [] }]);
    expect(op.parameters.find((p: { name: string }) => p.name === 'x-amz-target')).toMatchObject({ in: 'header' });
    expect(op.responses['400'].description).toContain('__type');
    expect(op.description).toContain('AssumeRoleWithWebIdentity');
    expect(doc.paths['/aws/']).toBeUndefined();
  });
});
