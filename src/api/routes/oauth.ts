// /oauth/*: browser sign-in through the organisation's IdP, the device flow for `signbridge login`, and a key's
// self-service (whoami, revoke). Without an IdP configured, every sign-in endpoint answers 503
// oauth_not_configured; whoami and revoke need only an API key and always work. docs/oauth.md.

import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { rolesOf } from '../../auth/api-keys.js';
import { matchAutoJoin } from '../../auth/oidc/auto-join.js';
import { DeviceFlow, formatUserCode, normaliseUserCode } from '../../auth/oidc/device-flow.js';
import { codeEntryPage, confirmPage, messagePage, noMembershipPage, signedInPage } from '../../auth/oidc/pages.js';
import { RelyingParty, SIGN_IN_TTL_MS } from '../../auth/oidc/relying-party.js';
import {
  type ActiveSession,
  appendCookie,
  BrowserSessions,
  CSRF_FIELD,
  constantTimeEqual,
  cookieName,
  csrfValid,
  readCookie,
  type SessionSettings,
  serializeCookie,
} from '../../auth/oidc/sessions.js';
import type { OidcSettings } from '../../auth/oidc/settings.js';
import { ApiError, isApiError } from '../../errors.js';
import { formObject } from '../../net/form-fields.js';
import { GLOBAL_TENANT, type PersonRecord } from '../../store/people/people-store.js';
import { counterKey } from '../../store/records/counter-names.js';
import type { Role } from '../../store/records/roles.js';
import type { Store } from '../../store/store.js';
import { PAGE_HEADERS } from '../../web/layout.js';
import { authenticate } from '../authenticate.js';
import {
  DevicePollQuery,
  DevicePollResponse,
  DeviceStartRequest,
  DeviceStartResponse,
  RevokeResponse,
  StartQuery,
  WhoamiResponse,
} from '../oauth-schemas.js';
import { errorResponse } from '../responses.js';

export interface OAuthOptions {
  store: Store;
  now: () => Date;
  /** Absent: no IdP configured. */
  oidc?: OidcSettings;
  /** The service's public base URL (redirect URIs, verification links). A function when known only after listen. */
  publicUrl?: string | (() => string);
  sessions?: SessionSettings;
  /** Wrong codes an address may enter per window on the verification page (default 10 per 10 min). */
  codeEntryLimit?: { max: number; windowMs: number };
  /** Device flows an address may start per window (default 30 per minute). */
  deviceStartLimit?: { max: number; windowMs: number };
}

const NOT_CONFIGURED =
  'sign-in through an identity provider is not configured on this service: set SIGNBRIDGE_OIDC_ISSUER, ' +
  'SIGNBRIDGE_OIDC_CLIENT_ID, SIGNBRIDGE_OIDC_CLIENT_SECRET and SIGNBRIDGE_PUBLIC_URL (docs/oauth.md)';

/** Endpoints that need only an API key, not an IdP. */
const KEY_ONLY = new Set(['/oauth/revoke', '/oauth/whoami']);

const errors = (...codes: number[]) => Object.fromEntries(codes.map((c) => [c, errorResponse(c)]));

/** A response schema with a description of its own in the OpenAPI document (not "Default Response"). */
const described = <T extends object>(schema: T, description: string): T => ({ ...schema, description });

/** Where a sign-in ends when `return_to` is absent or not on this service. */
const DEFAULT_RETURN_TO = '/oauth/account';

/**
 * `return_to` kept only when it is a page of this service. It is resolved as a browser would resolve it (WHATWG
 * URL: tabs and newlines dropped, `\` read as `/`, so `/<TAB>/evil` and `/\evil` are the host `evil`), kept only when
 * the result has the service's own origin, and returned as the normalised path, query and fragment: percent-encoded
 * ASCII, so the Location header never carries a control or non-Latin-1 character (open redirects, header errors).
 */
export function safeReturnTo(value: string | undefined, publicUrl: string): string {
  if (!value) return DEFAULT_RETURN_TO;
  const own = new URL(publicUrl);
  let resolved: URL;
  try {
    resolved = new URL(value, own);
  } catch {
    return DEFAULT_RETURN_TO;
  }
  if (resolved.origin !== own.origin) return DEFAULT_RETURN_TO;
  return `${resolved.pathname}${resolved.search}${resolved.hash}`;
}

function personLabel(p: PersonRecord): string {
  return p.email ? `${p.email}${p.emailVerified ? '' : ' (unverified)'}` : p.subject;
}

/**
 * Counts wrong code entries per address in a fixed window (RFC 8628 §5.1: the user code is guessable). The counts
 * live in the store (the trial counters' table), so several instances behind a load balancer count together and a
 * restart gives no fresh allowance.
 */
class EntryLimiter {
  constructor(
    private readonly store: Store,
    private readonly limit: { max: number; windowMs: number },
  ) {}

  async blocked(address: string, now: number): Promise<boolean> {
    return (
      (await this.store.requestCounts.read(counterKey('wrongCode', address), now, this.limit.windowMs)) >=
      this.limit.max
    );
  }

  async failed(address: string, now: number): Promise<void> {
    await this.store.requestCounts.count(counterKey('wrongCode', address), now, this.limit.windowMs);
  }
}

export async function oauthRoutes(app: FastifyInstance, opts: OAuthOptions): Promise<void> {
  const typed = app.withTypeProvider<TypeBoxTypeProvider>();
  const { store, now, oidc } = opts;
  const publicUrl = (): string => {
    const url = typeof opts.publicUrl === 'function' ? opts.publicUrl() : opts.publicUrl;
    if (!url) throw new ApiError('oauth_not_configured', NOT_CONFIGURED);
    return url.replace(/\/+$/, '');
  };
  const secure = (() => {
    try {
      return publicUrl().startsWith('https:');
    } catch {
      return false;
    }
  })();
  const signInCookie = cookieName('signbridge-signin', secure);
  const sessions = new BrowserSessions(store.people, secure, now, opts.sessions);
  const relyingParty = oidc && new RelyingParty(oidc, store.people, () => `${publicUrl()}/oauth/callback`, now);
  const devices = new DeviceFlow(store, now, oidc?.personKeyMs ?? 12 * 3_600_000);
  const limiter = new EntryLimiter(store, opts.codeEntryLimit ?? { max: 10, windowMs: 10 * 60_000 });
  const rp = (): RelyingParty => {
    if (!relyingParty) throw new ApiError('oauth_not_configured', NOT_CONFIGURED);
    return relyingParty;
  };

  // Forms post urlencoded; an empty JSON body counts as {} (the device start body is optional).
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_req, body, done) => {
    done(null, formObject(body as string));
  });
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
    const text = (body as string).trim();
    if (text === '') return done(null, {});
    try {
      done(null, JSON.parse(text));
    } catch (err) {
      done(new ApiError('invalid_json', `body is not valid JSON: ${(err as Error).message}`), undefined);
    }
  });

  // Before parsing and validation: without an IdP the answer is the same whatever was sent.
  app.addHook('onRequest', async (request) => {
    if (!oidc && !KEY_ONLY.has(request.url.split('?')[0] as string)) {
      throw new ApiError('oauth_not_configured', NOT_CONFIGURED);
    }
  });
  // The device start body is optional: no body at all is an empty one.
  app.addHook('preValidation', async (request) => {
    if (request.url.split('?')[0] === '/oauth/device/start' && request.body === undefined) request.body = {};
  });
  // Browser pages answer errors as HTML with the same status and code (a person reads them, not a program).
  const html = (reply: FastifyReply, status: number, body: string) =>
    reply.code(status).headers(PAGE_HEADERS).type('text/html; charset=utf-8').send(body);
  const htmlError = (reply: FastifyReply, err: unknown) => {
    if (!isApiError(err)) throw err;
    return html(reply, err.statusCode, messagePage('Sign-in problem', `${err.message} (${err.code})`));
  };
  const requireSession = async (request: FastifyRequest, reply: FastifyReply): Promise<ActiveSession | null> => {
    const active = await sessions.lookup(request);
    if (active) return active;
    await reply.redirect(`/oauth/start?return_to=${encodeURIComponent(request.url)}`, 303);
    return null;
  };

  typed.get(
    '/oauth/start',
    {
      schema: {
        operationId: 'oauth_start',
        summary: 'Start a browser sign-in: redirects to the identity provider (authorization code + PKCE)',
        tags: ['oauth'],
        querystring: StartQuery,
        response: { 302: Type302(), ...errors(400, 503) },
      },
    },
    async (request, reply) => {
      const { url, state } = await rp().start(safeReturnTo(request.query.return_to, publicUrl()));
      // Binds the attempt to this browser: a callback arriving in another browser (login CSRF) has no cookie.
      appendCookie(reply, serializeCookie(signInCookie, state, { secure, maxAgeS: Math.floor(SIGN_IN_TTL_MS / 1000) }));
      return reply.header('cache-control', 'no-store').redirect(url, 302);
    },
  );

  app.get('/oauth/callback', { schema: { hide: true } }, async (request, reply) => {
    try {
      const callbackUrl = new URL(request.url, `${publicUrl()}/`);
      const state = callbackUrl.searchParams.get('state') ?? '';
      const bound = readCookie(request, signInCookie);
      appendCookie(reply, serializeCookie(signInCookie, '', { secure, maxAgeS: 0 }));
      if (!bound || !constantTimeEqual(bound, state)) {
        throw new ApiError(
          'invalid_sign_in',
          'this sign-in was not started in this browser (state mismatch); start again',
        );
      }
      const done = await rp().finish(callbackUrl);
      const grants = matchAutoJoin(oidc?.autoJoin ?? [], done.claims, done.groups);
      const person = await store.people.signIn(done.claims, now().toISOString(), grants);
      if (person.disabledAt) {
        return html(reply, 403, messagePage('Account disabled', 'Your account is disabled on this service.'));
      }
      await sessions.open(request, reply, person.id);
      await store.audit.append({
        at: now().toISOString(),
        tenantId: null,
        actor: `person:${person.id}`,
        action: 'sign_in',
        outcome: 'signed_in',
        details: { person: person.id, issuer: person.issuer, subject: person.subject },
      });
      // Checked again on the way out: an attempt stored by an older version may hold a value kept by looser rules.
      return reply.header('cache-control', 'no-store').redirect(safeReturnTo(done.returnTo, publicUrl()), 303);
    } catch (err) {
      return htmlError(reply, err);
    }
  });

  app.get('/oauth/account', { schema: { hide: true } }, async (request, reply) => {
    const active = await requireSession(request, reply);
    if (!active) return reply;
    const memberships = await store.people.listMemberships({ personId: active.person.id });
    return html(
      reply,
      200,
      signedInPage(
        personLabel(active.person),
        memberships.map((m) => ({
          tenantId: m.tenantId === GLOBAL_TENANT ? '(all tenants)' : m.tenantId,
          role: m.role,
        })),
        active.session.csrfToken,
      ),
    );
  });

  app.post('/oauth/logout', { schema: { hide: true } }, async (request, reply) => {
    const active = await sessions.lookup(request);
    if (active && !csrfValid(active.session, (request.body as Record<string, unknown> | undefined)?.[CSRF_FIELD])) {
      return html(
        reply,
        403,
        messagePage('Sign-out refused', 'The form is missing its CSRF token (csrf_token_invalid).'),
      );
    }
    await sessions.close(request, reply);
    return html(reply, 200, messagePage('Signed out', 'You are signed out of signbridge.'));
  });

  const startLimit = opts.deviceStartLimit ?? { max: 30, windowMs: 60_000 };
  typed.post(
    '/oauth/device/start',
    {
      // Unauthenticated and it writes a row: limited per address like the trial endpoint, with the same counters
      // in the store (shared by every instance, kept across restarts), under their own key.
      onRequest: async (request, reply) => {
        const nowMs = opts.now().getTime();
        const { count, windowStartMs } = await opts.store.requestCounts.count(
          counterKey('deviceStart', request.ip),
          nowMs,
          startLimit.windowMs,
        );
        if (count <= startLimit.max) return;
        const retryS = Math.max(1, Math.ceil((windowStartMs + startLimit.windowMs - nowMs) / 1000));
        reply.header('retry-after', retryS);
        throw new ApiError(
          'rate_limited',
          `device sign-ins are limited to ${startLimit.max} per ${startLimit.windowMs / 1000} s per address; retry after ${retryS} s`,
        );
      },
      schema: {
        operationId: 'oauth_device_start',
        summary: 'Start the device flow (RFC 8628) for `signbridge login`',
        tags: ['oauth'],
        body: DeviceStartRequest,
        response: {
          200: described(DeviceStartResponse, 'the device code, the user code and where to enter it (RFC 8628 3.2)'),
          ...errors(400, 415, 429, 503),
        },
      },
    },
    async (request) => {
      const body = request.body ?? {};
      // Housekeeping where codes are made: expired codes, sessions and sign-in attempts go.
      await store.people.purgeExpired(now().toISOString());
      const started = await devices.start({
        tenantId: body.tenant_id ?? null,
        clientName: body.client_name ?? null,
        userAgent: request.headers['user-agent']?.slice(0, 200) ?? null,
        address: request.ip,
      });
      const verification = `${publicUrl()}/oauth/device`;
      const shown = formatUserCode(started.userCode);
      return {
        device_code: started.deviceCode,
        user_code: shown,
        verification_uri: verification,
        verification_uri_complete: `${verification}?user_code=${shown}`,
        expires_in: started.expiresIn,
        interval: started.interval,
      };
    },
  );

  typed.post(
    '/oauth/device/poll',
    {
      schema: {
        operationId: 'oauth_device_poll',
        summary:
          'Poll the device flow: 400 authorization_pending | slow_down | access_denied | expired_token, or the key once',
        tags: ['oauth'],
        querystring: DevicePollQuery,
        response: {
          200: described(DevicePollResponse, 'approved: the API key, exactly once'),
          ...errors(400, 503),
        },
      },
    },
    async (request, reply) => {
      const grant = await devices.poll(request.query.device_code);
      reply.header('cache-control', 'no-store');
      return {
        api_key: grant.apiKey,
        token_type: 'Bearer' as const,
        tenant_id: grant.tenantId,
        roles: grant.roles,
        expires_in: Math.max(0, Math.floor((grant.expiresAt.getTime() - now().getTime()) / 1000)),
        expires_at: grant.expiresAt.toISOString(),
        email: grant.email,
      };
    },
  );

  app.get('/oauth/device', { schema: { hide: true } }, async (request, reply) => {
    const active = await requireSession(request, reply);
    if (!active) return reply;
    const typedIn = (request.query as { user_code?: string }).user_code;
    if (typedIn === undefined || typedIn === '') return html(reply, 200, codeEntryPage());
    const at = now().getTime();
    if (await limiter.blocked(request.ip, at)) {
      return html(
        reply,
        429,
        codeEntryPage('Too many wrong codes from this address; wait a few minutes (rate_limited).'),
      );
    }
    const code = normaliseUserCode(typedIn);
    const record = code && (await devices.pending(code));
    if (!record) {
      await limiter.failed(request.ip, at);
      return html(
        reply,
        400,
        codeEntryPage('That code is unknown, expired or already used. Check the device.', typedIn),
      );
    }
    const choices = await tenantChoices(active.person.id, record.tenantId);
    // A GET decides nothing: the code stays pending until a confirmation POST (below) denies or approves it.
    if (choices.length === 0) {
      return html(
        reply,
        403,
        noMembershipPage({
          person: personLabel(active.person),
          tenantId: record.tenantId,
          userCode: record.userCode,
          csrfToken: active.session.csrfToken,
        }),
      );
    }
    return html(
      reply,
      200,
      confirmPage({
        userCode: record.userCode,
        csrfToken: active.session.csrfToken,
        person: personLabel(active.person),
        clientName: record.clientName,
        userAgent: record.userAgent,
        address: record.address,
        requestedAt: record.createdAt,
        choices,
        expiresAt: record.expiresAt,
      }),
    );
  });

  app.post('/oauth/device/decision', { schema: { hide: true } }, async (request, reply) => {
    const active = await sessions.lookup(request);
    if (!active)
      return html(reply, 401, messagePage('Not signed in', 'Your session ended; open the device link again.'));
    const form = (request.body ?? {}) as Record<string, unknown>;
    if (!csrfValid(active.session, form[CSRF_FIELD])) {
      return html(
        reply,
        403,
        messagePage('Refused', 'The form is missing its CSRF token or it is wrong (csrf_token_invalid).'),
      );
    }
    const at = now().getTime();
    if (await limiter.blocked(request.ip, at)) {
      return html(
        reply,
        429,
        messagePage('Too many attempts', 'Too many wrong codes from this address (rate_limited).'),
      );
    }
    const code = typeof form.user_code === 'string' ? normaliseUserCode(form.user_code) : undefined;
    const record = code && (await devices.pending(code));
    if (!record) {
      await limiter.failed(request.ip, at);
      return html(reply, 400, messagePage('Code not valid', 'That code is unknown, expired or already decided.'));
    }
    if (form.decision !== 'confirm') {
      await devices.deny(record, active.person.id);
      return html(reply, 200, messagePage('Denied', 'The device was not signed in. You can close this page.'));
    }
    const choices = await tenantChoices(active.person.id, record.tenantId);
    if (choices.length === 0) {
      // Confirmed by someone with no role that fits: the device is told (access_denied) rather than left waiting.
      await devices.deny(record, active.person.id);
      return html(
        reply,
        403,
        messagePage(
          'No membership',
          `You (${personLabel(active.person)}) have no role in ${record.tenantId ?? 'any tenant'}; the device was denied. Ask an administrator of the tenant to add you.`,
        ),
      );
    }
    const tenantId = typeof form.tenant_id === 'string' ? form.tenant_id : '';
    const choice = choices.find((c) => c.tenantId === tenantId);
    if (!choice) {
      return html(reply, 403, messagePage('Refused', `You have no role in tenant ${tenantId} to grant.`));
    }
    if (!(await devices.approve(record, active.person.id, choice.tenantId, choice.roles))) {
      return html(reply, 409, messagePage('Already decided', 'This code was decided meanwhile.'));
    }
    return html(
      reply,
      200,
      messagePage(
        'Device signed in',
        `The device now gets a key for ${choice.tenantId} (${choice.roles.join(', ')}). You can close this page.`,
      ),
    );
  });

  /** The tenants (with the person's roles in each) a device code may be granted for. */
  async function tenantChoices(personId: string, wanted: string | null) {
    const memberships = await store.people.listMemberships({ personId });
    const byTenant = new Map<string, Role[]>();
    for (const m of memberships) {
      if (m.tenantId === GLOBAL_TENANT) continue;
      if (wanted !== null && m.tenantId !== wanted) continue;
      byTenant.set(m.tenantId, [...(byTenant.get(m.tenantId) ?? []), m.role]);
    }
    return [...byTenant].map(([tenantId, roles]) => ({ tenantId, roles }));
  }

  // The key's own self-service: only the API key is needed, with or without an IdP.
  app.register(async (keyed) => {
    keyed.addHook('onRequest', authenticate(store, now));
    keyed.withTypeProvider<TypeBoxTypeProvider>().post(
      '/oauth/revoke',
      {
        schema: {
          operationId: 'oauth_revoke',
          summary: 'Revoke the API key that authenticates this request (`signbridge logout`)',
          tags: ['oauth'],
          security: [{ bearerAuth: [] }],
          response: {
            200: described(RevokeResponse, 'the calling key is revoked'),
            ...errors(401),
          },
        },
      },
      async (request) => {
        const caller = request.caller as NonNullable<typeof request.caller>;
        await store.apiKeys.revoke(caller.id, now().toISOString());
        await store.audit.append({
          at: now().toISOString(),
          tenantId: caller.tenantId,
          actor: caller.id,
          action: 'api_key_revoke',
          outcome: 'revoked',
          details: { api_key_id: caller.id, by: 'itself', ...(caller.personId && { person: caller.personId }) },
        });
        return { revoked: true as const };
      },
    );
    keyed.withTypeProvider<TypeBoxTypeProvider>().get(
      '/oauth/whoami',
      {
        schema: {
          operationId: 'oauth_whoami',
          summary: 'Who this API key is: tenant, roles, expiry and, for a person, email and subject',
          tags: ['oauth'],
          security: [{ bearerAuth: [] }],
          response: {
            200: described(WhoamiResponse, 'the calling key: its tenant, roles, expiry and owner'),
            ...errors(401),
          },
        },
      },
      async (request) => {
        const caller = request.caller as NonNullable<typeof request.caller>;
        const person = caller.personId ? await store.people.getPerson(caller.personId) : undefined;
        return {
          tenant_id: caller.tenantId,
          roles: rolesOf(caller),
          expires_at: caller.expiresAt ?? null,
          email: person?.emailVerified ? person.email : null,
          subject: person?.subject ?? null,
          kind: person ? ('person' as const) : ('admin' as const),
        };
      },
    );
  });
}

/** The 302 of /oauth/start, for the OpenAPI document. */
function Type302() {
  return { description: 'redirect to the identity provider (Location header)', type: 'null' };
}
