// What the console's pages share: the console's options and the context each page handler gets, and the small
// helpers several pages use. A leaf below console.ts and its pages, so that the console can register each page's
// routes while the pages take their context from here (no import circle between the console and its pages).
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ActiveSession, SessionSettings } from '../auth/oidc/sessions.js';
import { ApiError } from '../errors.js';
import type { EventBuilder } from '../events/event-builder.js';
import type { WebhookSendSettings } from '../events/webhook-sender.js';
import type { ExceptionService } from '../signing/exception-service.js';
import type { SigningService } from '../signing/signing-service.js';
import type { PersonRecord } from '../store/people/people-store.js';
import type { Role } from '../store/records/roles.js';
import type { Store } from '../store/store.js';
import { type Html, html } from './layout.js';

export interface ConsoleOptions {
  store: Store;
  signing: SigningService;
  exceptions: ExceptionService;
  /** Makes the events of the changes made here (api_key.*, trust.changed). */
  events: EventBuilder;
  now: () => Date;
  /** Absent: no IdP, so nobody can sign in; the console says so. */
  signInConfigured: boolean;
  publicUrl?: string | (() => string);
  sessions?: SessionSettings;
  /** Lifetime of device-flow keys; console keys longer than this are an admin's explicit choice. */
  personKeyMs: number;
  /** Where webhooks may be sent (config webhooks.*): a new subscription's URL is checked against it. */
  webhooks: WebhookSendSettings;
}

/** What every console page handler gets: the signed-in person and their roles per tenant. */
export interface Visitor extends ActiveSession {
  label: string;
  roles: Map<string, Role[]>;
}

export interface ConsoleContext extends ConsoleOptions {
  visitor(request: FastifyRequest): Visitor;
  /** Sends a console page (no-store, CSP without scripts, no framing). */
  send(reply: FastifyReply, status: number, title: string, body: Html, request: FastifyRequest): FastifyReply;
  /** Sends the error page for an ApiError (its status), rethrowing anything else. */
  fail(reply: FastifyReply, err: unknown, request: FastifyRequest): FastifyReply;
  /** The visitor's roles in `tenantId`, or a 404 page when they have none there (tenants of others stay unseen). */
  rolesIn(request: FastifyRequest, reply: FastifyReply, tenantId: string): Role[] | undefined;
  /** Redirect after a POST, with a notice code for the next page. */
  done(reply: FastifyReply, path: string, notice: string): FastifyReply;
}

export function personLabel(p: PersonRecord): string {
  return p.email ? `${p.email}${p.emailVerified ? '' : ' (unverified)'}` : p.subject;
}

export function noMembership(v: Visitor): Html {
  return html`<p role="status">You are signed in as ${v.label}, but you have no role in any tenant, so there is nothing
you can see or do here. Ask an administrator of your tenant to add you (<code>signbridge admin member add</code> or
the members page of this console).</p>`;
}

export const canSeeExceptions = (roles: readonly Role[]) =>
  roles.some((r) => r === 'admin' || r === 'approver' || r === 'security_reviewer');
export const canSeeAudit = canSeeExceptions;

/**
 * The tenant of the page's `:tenant` when the visitor is its admin; else undefined, the 404 (no role there) or 403
 * page already sent. `what` names what was asked for, in the 403's message.
 */
export function tenantAdminOf(
  ctx: ConsoleContext,
  request: FastifyRequest,
  reply: FastifyReply,
  what: string,
): string | undefined {
  const tenant = (request.params as { tenant: string }).tenant;
  const roles = ctx.rolesIn(request, reply, tenant);
  if (!roles) return undefined;
  if (roles.includes('admin')) return tenant;
  ctx.fail(
    reply,
    new ApiError('forbidden', `${what} of ${tenant} needs the admin role; you have ${roles.join(', ')}`),
    request,
  );
  return undefined;
}
