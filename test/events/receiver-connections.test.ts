// A subscription's kept-alive connections to its receiver (src/events/receiver-connections.ts, over
// src/net/checked-connections.ts; issue 46): webhooks reuse connections, each connection's address is checked when
// it is made (a name that now resolves to an internal address is refused at the next connection), a connection the
// receiver drops as it is reused costs no failed delivery, and a removed or paused subscription's connections close.
// Real receivers on 127.0.0.1 that count the connections they accept; the settings' `resolve` stands in for DNS.
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ReceiverConnections } from '../../src/events/receiver-connections.js';
import { sendWebhook, type WebhookSendSettings } from '../../src/events/webhook-sender.js';
import type { Resolver } from '../../src/net/outbound-request.js';
import type { SubscriptionRecord } from '../../src/store/events/event-store.js';
import { selfSignedCert } from '../helpers/local-servers.js';
import { waitFor } from '../helpers/wait.js';

const REQUEST = { headers: { 'webhook-id': 'evt_1' }, body: '{"type":"key.rotated"}' };

interface CountingReceiver {
  port: number;
  /** Connections accepted, requests answered, connections closed. */
  connections: number;
  requests: number;
  closed: number;
  server: Server;
  close(): Promise<void>;
}

/** A receiver that counts the connections it accepts; `handle` answers (204 by default). */
async function countingReceiver(
  handle: (req: IncomingMessage, res: ServerResponse, n: number) => void = (_req, res) => res.writeHead(204).end(),
  tls?: { key: string; cert: string },
): Promise<CountingReceiver> {
  const sockets = new Set<Socket>();
  const state = { port: 0, connections: 0, requests: 0, closed: 0 } as CountingReceiver;
  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on('end', () => handle(req, res, ++state.requests));
  };
  const server = tls ? createHttpsServer(tls, onRequest) : createHttpServer(onRequest);
  server.on(tls ? 'secureConnection' : 'connection', (socket: Socket) => {
    state.connections++;
    sockets.add(socket);
    socket.on('close', () => {
      state.closed++;
      sockets.delete(socket);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.port = (server.address() as AddressInfo).port;
  state.server = server;
  state.close = async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return state;
}

function subscription(id: string, url: string, paused = false): SubscriptionRecord {
  return { id, url, pausedAt: paused ? '2026-12-06T00:00:00.000Z' : null } as SubscriptionRecord;
}

const opened: Array<{ close(): Promise<void> } | ReceiverConnections> = [];
afterEach(async () => {
  for (const thing of opened.splice(0)) {
    if (thing instanceof ReceiverConnections) thing.keepOnly(new Set());
    else await thing.close();
  }
});

describe("a subscription's kept-alive connections", () => {
  it('sends 40 webhooks, 8 at a time, over at most 8 connections (http), and over 1 one at a time (https)', async () => {
    const receiver = await countingReceiver();
    opened.push(receiver);
    const settings: WebhookSendSettings = { allow: ['127.0.0.1'], timeoutMs: 5000 };
    const connections = new ReceiverConnections(settings, { maxSockets: 8 });
    opened.push(connections);
    const sub = subscription('sub_a', `http://127.0.0.1:${receiver.port}/hook`);
    let next = 0;
    const results: string[] = [];
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next++ < 40) {
          results.push((await sendWebhook(sub.url, REQUEST, settings, connections.for(sub))).outcome);
        }
      }),
    );
    expect(results).toEqual(Array(40).fill('delivered'));
    expect(receiver.requests).toBe(40);
    expect(receiver.connections).toBeLessThanOrEqual(8);

    const tls = selfSignedCert();
    const secure = await countingReceiver(undefined, tls);
    opened.push(secure);
    const resolve: Resolver = async () => [{ address: '127.0.0.1', family: 4 }];
    const tlsSettings: WebhookSendSettings = { allow: ['127.0.0.0/8'], extraCaPem: tls.cert, timeoutMs: 5000, resolve };
    const tlsConnections = new ReceiverConnections(tlsSettings);
    opened.push(tlsConnections);
    const secureSub = subscription('sub_b', `https://hooks.example.com:${secure.port}/hook`);
    for (let i = 0; i < 5; i++) {
      const sent = await sendWebhook(secureSub.url, REQUEST, tlsSettings, tlsConnections.for(secureSub));
      expect(sent.outcome).toBe('delivered');
    }
    expect(secure.requests).toBe(5);
    expect(secure.connections).toBe(1);
  });

  it('checks each new connection: a name that now resolves to a loopback address is refused once it reconnects', async () => {
    const tls = selfSignedCert();
    const receiver = await countingReceiver(undefined, tls);
    opened.push(receiver);
    // The allow list holds 127.0.0.1 only: 127.0.0.2 is loopback, not listed, so refused.
    let answer = '127.0.0.1';
    let lookups = 0;
    const resolve: Resolver = async () => {
      lookups++;
      return [{ address: answer, family: 4 }];
    };
    const settings: WebhookSendSettings = { allow: ['127.0.0.1/32'], extraCaPem: tls.cert, timeoutMs: 5000, resolve };
    const connections = new ReceiverConnections(settings);
    opened.push(connections);
    const sub = subscription('sub_a', `https://hooks.example.com:${receiver.port}/hook`);
    for (let i = 0; i < 3; i++) {
      expect((await sendWebhook(sub.url, REQUEST, settings, connections.for(sub))).outcome).toBe('delivered');
    }
    // Resolved once, for the one connection the three requests shared.
    expect(lookups).toBe(1);
    expect(receiver.connections).toBe(1);
    // DNS changes; the receiver drops its idle connection, so the next request connects (and resolves) again.
    answer = '127.0.0.2';
    receiver.server.closeIdleConnections();
    await waitFor('the idle connection closed', () => receiver.closed === 1);
    const refused = await sendWebhook(sub.url, REQUEST, settings, connections.for(sub));
    expect(refused).toEqual({
      outcome: 'failed',
      error: expect.stringMatching(/the host hooks\.example\.com resolves to 127\.0\.0\.2, a loopback/),
    });
    expect(lookups).toBe(2);
    expect(receiver.requests).toBe(3);
    expect(receiver.connections).toBe(1);
  });

  it('a connection the receiver drops as it is reused: sent again at once on a fresh one, delivered', async () => {
    // The second request on the first connection is never answered: the receiver hangs up (as a receiver whose
    // keep-alive time-out ran out an instant before does).
    const receiver = await countingReceiver((req, res, n) => {
      if (n === 2) req.socket.destroy();
      else res.writeHead(204).end();
    });
    opened.push(receiver);
    const settings: WebhookSendSettings = { allow: ['127.0.0.1'], timeoutMs: 5000 };
    const connections = new ReceiverConnections(settings);
    opened.push(connections);
    const sub = subscription('sub_a', `http://127.0.0.1:${receiver.port}/hook`);
    expect((await sendWebhook(sub.url, REQUEST, settings, connections.for(sub))).outcome).toBe('delivered');
    expect((await sendWebhook(sub.url, REQUEST, settings, connections.for(sub))).outcome).toBe('delivered');
    expect(receiver.requests).toBe(3);
    expect(receiver.connections).toBe(2);
  });

  it('an answer slower than the idle time-out still arrives: that time-out is for unused connections only', async () => {
    const receiver = await countingReceiver((_req, res) => {
      setTimeout(() => res.writeHead(204).end(), 300);
    });
    opened.push(receiver);
    const settings: WebhookSendSettings = { allow: ['127.0.0.1'], timeoutMs: 5000 };
    const connections = new ReceiverConnections(settings, { idleMs: 20 });
    opened.push(connections);
    const sub = subscription('sub_a', `http://127.0.0.1:${receiver.port}/hook`);
    expect((await sendWebhook(sub.url, REQUEST, settings, connections.for(sub))).outcome).toBe('delivered');
    // And, unused past it, the connection is closed.
    await waitFor('the idle connection closed', () => receiver.closed === 1);
  });

  it("closes a subscription's connections once it is removed or paused, and a paused one connects afresh", async () => {
    const receiver = await countingReceiver();
    opened.push(receiver);
    const settings: WebhookSendSettings = { allow: ['127.0.0.1'], timeoutMs: 5000 };
    const connections = new ReceiverConnections(settings, { idleMs: 60_000 });
    opened.push(connections);
    const a = subscription('sub_a', `http://127.0.0.1:${receiver.port}/a`);
    const b = subscription('sub_b', `http://127.0.0.1:${receiver.port}/b`);
    await sendWebhook(a.url, REQUEST, settings, connections.for(a));
    await sendWebhook(b.url, REQUEST, settings, connections.for(b));
    // One connection each: a tenant's receiver never shares a socket with another subscription.
    expect(receiver.connections).toBe(2);
    expect(connections.size).toBe(2);
    connections.keepOnly(new Set(['sub_b']));
    await waitFor("sub_a's connection closed", () => receiver.closed === 1);
    expect(connections.size).toBe(1);
    expect(connections.for(subscription('sub_b', b.url, true))).toBeUndefined();
    connections.keepOnly(new Set());
    await waitFor("sub_b's connection closed", () => receiver.closed === 2);
    expect(connections.size).toBe(0);
  });
});
