// The pieces every signing door shares for a request held for a person's decision: one description of it
// (src/signing/held-description.ts) that the /v1 202, KMS's KMSInvalidStateException and Vault's held error all
// word, so all three name the same console page; and the end of the held wait when the client goes away
// (src/api/client-gone.ts with src/signing/held-wait.ts).
import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { heldMessage } from '../../src/api/aws/kms/sign-operations.js';
import { type ClosingResponse, clientGoneSignal } from '../../src/api/client-gone.js';
import { signOutcome } from '../../src/api/routes/v1-replies.js';
import { heldError } from '../../src/api/vault-transit/sign-inputs.js';
import { consolePageFor, describeHeld } from '../../src/signing/held-description.js';
import { waitForDecision } from '../../src/signing/held-wait.js';
import type { Pending } from '../../src/signing/sign-outcome.js';

const pending: Pending = {
  kind: 'pending',
  requestId: 'r/1 x',
  status: 'pending_approval',
  message: 'waits for 1 approval',
};

describe('the held request, described once', () => {
  it('names the console page under the public URL, the id escaped, without a doubled slash', () => {
    const held = describeHeld(pending, 'https://sb.example/');
    expect(held.consolePage).toBe('https://sb.example/console/requests#req-r%2F1%20x');
    expect(held.consolePage).toBe(consolePageFor('https://sb.example', pending.requestId));
    expect(held.awaits).toBe('approval');
    expect(describeHeld({ ...pending, status: 'pending_security_review' }, undefined)).toMatchObject({
      awaits: 'a security review',
      consolePage: undefined,
    });
  });

  it('is the page every door names: the /v1 202, the KMS message and the Vault error', () => {
    const page = describeHeld(pending, 'https://sb.example').consolePage as string;
    expect(signOutcome(pending, 'https://sb.example').body).toEqual({
      message: pending.message,
      request_id: pending.requestId,
      status: pending.status,
      approve_url: page,
    });
    expect(heldMessage(pending, 'https://sb.example', 5000)).toContain(`decide it at ${page} (`);
    expect(heldError(pending, 'https://sb.example').message).toContain(`approve it at ${page} (`);
  });

  it('without a public URL no door names a page', () => {
    expect(signOutcome(pending, undefined).body).not.toHaveProperty('approve_url');
    expect(heldMessage(pending, undefined, 5000)).toContain('decide it in the web console');
    expect(heldError(pending, undefined).message).toContain('approve it in the signbridge console');
  });
});

/** A response the test closes by hand, answered or not. */
function response(state: { destroyed?: boolean; writableEnded?: boolean } = {}) {
  const emitter = new EventEmitter();
  const fake = Object.assign(emitter, { destroyed: false, writableEnded: false, ...state });
  return fake as typeof fake & ClosingResponse;
}

describe('the client-gone signal', () => {
  it('aborts when the response closes unanswered', () => {
    const res = response();
    const signal = clientGoneSignal(res);
    expect(signal.aborted).toBe(false);
    res.emit('close');
    expect(signal.aborted).toBe(true);
  });

  it('does not abort when the response closes after its answer', () => {
    const res = response();
    const signal = clientGoneSignal(res);
    res.writableEnded = true;
    res.emit('close');
    expect(signal.aborted).toBe(false);
  });

  it('is aborted at once for a client already gone', () => {
    expect(clientGoneSignal(response({ destroyed: true })).aborted).toBe(true);
  });

  it('ends a held wait that would otherwise last an hour', async () => {
    const res = response();
    const signal = clientGoneSignal(res);
    let reads = 0;
    const collector = {
      async collect(): Promise<Pending> {
        reads++;
        return pending;
      },
    };
    const waiting = waitForDecision(collector, 't', pending, Buffer.alloc(32), {
      waitMs: 3_600_000,
      pollMs: 3_600_000,
      signal,
    });
    res.emit('close');
    await expect(waiting).resolves.toBe(pending);
    expect(reads).toBe(0);
  });
});
