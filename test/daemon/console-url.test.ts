// The module's notice line for a held request names the console page the service itself gives as the 202's
// approve_url: the remote upstream builds it with the service's one function (src/signing/held-description.ts),
// so the two cannot drift apart.
import { describe, expect, it } from 'vitest';
import { apiKeyFromEnv } from '../../daemon/credentials.js';
import { RemoteUpstream } from '../../daemon/upstream/remote-upstream.js';
import { describeHeld } from '../../src/signing/held-description.js';

describe('the remote upstream names the console page of a held request', () => {
  it('is the page the service describes for it, under the service URL the daemon was given', async () => {
    const upstream = new RemoteUpstream({
      url: 'https://signing.example/base/',
      apiKey: apiKeyFromEnv('sbk_test'),
      timeoutMs: 1000,
    });
    try {
      const requestId = 'req 1/2';
      const held = describeHeld(
        { kind: 'pending', requestId, status: 'pending_approval', message: 'waiting' },
        'https://signing.example/base',
      );
      expect(upstream.consoleUrlFor(requestId)).toBe(held.consolePage);
      expect(upstream.consoleUrlFor(requestId)).toBe('https://signing.example/base/console/requests#req-req%201%2F2');
    } finally {
      await upstream.close();
    }
  });
});
