// Finding a CI job's ID token (src/cli/ci/id-token.ts) against the tests' local issuer speaking GitHub Actions' token
// request protocol (its bearer checked, the audience passed), a GitLab-style variable, a Kubernetes-style token file
// re-read at each exchange, and the message when there is none.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { decodeJwt } from 'jose';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findIdTokenSource, IdTokenError } from '../../src/cli/ci/id-token.js';
import { type CiIssuer, startCiIssuer } from '../helpers/ci-issuer.js';
import { makeTempDir } from '../helpers/service.js';

let issuer: CiIssuer;
let dispatcher: Agent;

beforeAll(async () => {
  issuer = await startCiIssuer();
  dispatcher = new Agent({ connect: { ca: readFileSync(issuer.caFile) } });
}, 60_000);
afterAll(async () => {
  await dispatcher?.close();
  await issuer?.close();
});

const githubEnv = () => ({
  ACTIONS_ID_TOKEN_REQUEST_URL: issuer.github.requestUrl,
  ACTIONS_ID_TOKEN_REQUEST_TOKEN: issuer.github.requestToken,
});

describe('GitHub Actions', () => {
  it('asks the token service with the request token for the configured audience', async () => {
    const source = findIdTokenSource({ audience: 'https://signbridge.example.com', env: githubEnv(), dispatcher });
    const claims = decodeJwt(await source.get());
    expect(claims.aud).toBe('https://signbridge.example.com');
    expect(claims.iss).toBe(issuer.url);
    expect(claims.repository).toBe('acme/app');
    // Each exchange gets a token of its own (GitHub mints one per request).
    expect(decodeJwt(await source.get()).jti).not.toBe(claims.jti);
    expect(source.description).not.toContain(issuer.github.requestToken);
  });

  it('says the request token was refused, without showing it', async () => {
    const source = findIdTokenSource({
      audience: 'a',
      env: { ...githubEnv(), ACTIONS_ID_TOKEN_REQUEST_TOKEN: 'not-the-token' },
      dispatcher,
    });
    const err = await source.get().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(IdTokenError);
    expect((err as Error).message).toMatch(/answered HTTP 401 \(the request token was refused\)/);
    expect((err as Error).message).not.toContain('not-the-token');
  });

  it('says the token service cannot be reached', async () => {
    await issuer.stop();
    try {
      const source = findIdTokenSource({ audience: 'a', env: githubEnv(), dispatcher });
      await expect(source.get()).rejects.toThrow(
        /^cannot reach GitHub Actions' token service \(https:\/\/127\.0\.0\.1:\d+\): (ECONNREFUSED|UND_ERR_SOCKET)$/,
      );
    } finally {
      await issuer.start();
    }
  });
});

describe('GitLab variable and token file', () => {
  it('reads the variable --id-token-env names, before GitHub', async () => {
    const token = await issuer.mint({ sub: 'project_path:acme/app:ref_type:branch:ref:main', aud: 'x' });
    const source = findIdTokenSource({
      audience: 'ignored',
      idTokenEnv: 'SIGNBRIDGE_GITLAB_TOKEN',
      env: { ...githubEnv(), SIGNBRIDGE_GITLAB_TOKEN: `${token}\n` },
    });
    expect(source.description).toBe('variable SIGNBRIDGE_GITLAB_TOKEN');
    expect(await source.get()).toBe(token);
  });

  it('reads SIGNBRIDGE_ID_TOKEN by default; a named variable that is empty or unset is an error, never a fallback', async () => {
    expect(await findIdTokenSource({ audience: 'a', env: { SIGNBRIDGE_ID_TOKEN: 'tok' } }).get()).toBe('tok');
    expect(() => findIdTokenSource({ audience: 'a', idTokenEnv: 'MY_TOKEN', env: { MY_TOKEN: ' ' } })).toThrow(
      /--id-token-env MY_TOKEN: the variable is set but empty/,
    );
    // Named, it is the source: GitHub's variables beside it are not used instead.
    expect(() => findIdTokenSource({ audience: 'a', idTokenEnv: 'MY_TOKEN', env: githubEnv() })).toThrow(
      /--id-token-env MY_TOKEN: the variable is not set/,
    );
  });

  it('an empty SIGNBRIDGE_ID_TOKEN counts as unset: GitHub’s token request is used, or the message says it was empty', async () => {
    const source = findIdTokenSource({ audience: 'a', env: { ...githubEnv(), SIGNBRIDGE_ID_TOKEN: '' } });
    expect(source.description).toBe('GitHub Actions (ACTIONS_ID_TOKEN_REQUEST_URL)');
    expect(() => findIdTokenSource({ audience: 'a', env: { SIGNBRIDGE_ID_TOKEN: ' ' } })).toThrow(
      /no CI ID token found: looked for the variable SIGNBRIDGE_ID_TOKEN, set but empty/,
    );
  });

  it('re-reads a token file at each exchange (the kubelet rewrites it)', async () => {
    const file = join(makeTempDir('sb-ci-token-'), 'token');
    writeFileSync(file, 'first-token\n');
    const source = findIdTokenSource({ audience: 'a', idTokenFile: file, env: githubEnv() });
    expect(await source.get()).toBe('first-token');
    writeFileSync(file, 'second-token\n');
    expect(await source.get()).toBe('second-token');
    expect(() => findIdTokenSource({ audience: 'a', idTokenFile: join(file, '..', 'missing'), env: {} })).toThrow(
      /ID token file .*missing: ENOENT/,
    );
  });
});

describe('no token', () => {
  it('names every place it looked and the permission GitHub needs', () => {
    let message = '';
    try {
      findIdTokenSource({ audience: 'a', env: { ACTIONS_ID_TOKEN_REQUEST_URL: issuer.github.requestUrl } });
    } catch (err) {
      expect(err).toBeInstanceOf(IdTokenError);
      message = (err as Error).message;
    }
    expect(message).toContain('no CI ID token found');
    expect(message).toContain('SIGNBRIDGE_ID_TOKEN');
    expect(message).toContain('--id-token-env');
    expect(message).toContain('ACTIONS_ID_TOKEN_REQUEST_URL and ACTIONS_ID_TOKEN_REQUEST_TOKEN');
    expect(message).toContain('permissions: id-token: write');
    expect(message).toContain('--id-token-file');
  });
});
