// The few server-rendered pages of sign-in and device confirmation: plain HTML forms that work without JavaScript,
// every input labelled, every state-changing form carrying the session's CSRF token. Everything shown is escaped.
import { CSRF_FIELD } from './sessions.js';

export function escapeHtml(value: string): string {
  return value
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;')
    .replaceAll("'", '&#39;');
}

export function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)} - signbridge</title>
<style>body{font-family:system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem;line-height:1.5}
code,.code{font-family:ui-monospace,monospace;font-size:1.4em;letter-spacing:.1em}
dt{font-weight:bold}button,input{font-size:1em;padding:.4em .8em}</style>
</head>
<body>
<main>
<h1>${escapeHtml(title)}</h1>
${body}
</main>
</body>
</html>
`;
}

export function messagePage(title: string, message: string): string {
  return page(title, `<p role="status">${escapeHtml(message)}</p>`);
}

export function codeEntryPage(problem?: string, value = ''): string {
  return page(
    'Connect a device',
    `${problem ? `<p role="alert">${escapeHtml(problem)}</p>` : ''}
<form method="get" action="/oauth/device">
<label for="user_code">Code shown on the device</label>
<input id="user_code" name="user_code" autocomplete="off" autocapitalize="characters" spellcheck="false"
 required maxlength="16" value="${escapeHtml(value)}" aria-describedby="code-help">
<p id="code-help">Eight letters, like BCDF-GHJK. You will see what you are about to allow before anything happens.</p>
<button type="submit">Continue</button>
</form>`,
  );
}

export interface ConfirmView {
  userCode: string;
  csrfToken: string;
  person: string;
  clientName: string | null;
  userAgent: string | null;
  address: string;
  requestedAt: string;
  /** Tenants with the roles a key would carry in each; one entry when the device named its tenant. */
  choices: Array<{ tenantId: string; roles: string[] }>;
  expiresAt: string;
}

/** RFC 8628 §5.4: the person sees which device asked and what it gets, and must confirm (never skipped). */
export function confirmPage(v: ConfirmView): string {
  const tenantField =
    v.choices.length === 1
      ? `<input type="hidden" name="tenant_id" value="${escapeHtml((v.choices[0] as { tenantId: string }).tenantId)}">`
      : `<fieldset><legend>Tenant the key acts for</legend>${v.choices
          .map(
            (c, i) =>
              `<div><input type="radio" id="tenant-${i}" name="tenant_id" value="${escapeHtml(c.tenantId)}"${i === 0 ? ' checked' : ''}>
<label for="tenant-${i}">${escapeHtml(c.tenantId)} (${escapeHtml(c.roles.join(', '))})</label></div>`,
          )
          .join('\n')}</fieldset>`;
  const single = v.choices.length === 1 ? (v.choices[0] as { tenantId: string; roles: string[] }) : undefined;
  return page(
    'Confirm the device sign-in',
    `<p>Check that this code is the one shown on <strong>your</strong> device. If you did not start this, deny it.</p>
<p class="code" aria-label="code">${escapeHtml(formatShown(v.userCode))}</p>
<dl>
<dt>Signed in as</dt><dd>${escapeHtml(v.person)}</dd>
<dt>Requested by</dt><dd>${escapeHtml(v.clientName ?? 'a device')}${v.userAgent ? ` (${escapeHtml(v.userAgent)})` : ''} from ${escapeHtml(v.address)}</dd>
<dt>Requested at</dt><dd><time datetime="${escapeHtml(v.requestedAt)}">${escapeHtml(v.requestedAt)}</time></dd>
${single ? `<dt>Tenant</dt><dd>${escapeHtml(single.tenantId)}</dd><dt>Roles</dt><dd>${escapeHtml(single.roles.join(', '))}</dd>` : ''}
<dt>Code valid until</dt><dd><time datetime="${escapeHtml(v.expiresAt)}">${escapeHtml(v.expiresAt)}</time></dd>
</dl>
<form method="post" action="/oauth/device/decision">
<input type="hidden" name="${CSRF_FIELD}" value="${escapeHtml(v.csrfToken)}">
<input type="hidden" name="user_code" value="${escapeHtml(v.userCode)}">
${tenantField}
<button type="submit" name="decision" value="confirm">Confirm</button>
<button type="submit" name="decision" value="deny">Deny</button>
</form>`,
  );
}

/**
 * The code is valid but the person has no role that fits it. Opening the page changes nothing (anyone who sees a
 * colleague's code could otherwise cancel their login); the person may refuse the device with the form.
 */
export function noMembershipPage(v: { person: string; tenantId: string | null; userCode: string; csrfToken: string }) {
  return page(
    'No membership',
    `<p role="status">You (${escapeHtml(v.person)}) have no role in ${escapeHtml(v.tenantId ?? 'any tenant')}, so this
device cannot be signed in. Ask an administrator of the tenant to add you.</p>
<p>If this is a code you started, you can tell the device now; otherwise leave this page and nothing happens.</p>
<form method="post" action="/oauth/device/decision">
<input type="hidden" name="${CSRF_FIELD}" value="${escapeHtml(v.csrfToken)}">
<input type="hidden" name="user_code" value="${escapeHtml(v.userCode)}">
<button type="submit" name="decision" value="deny">Deny the device</button>
</form>`,
  );
}

export function signedInPage(
  person: string,
  memberships: Array<{ tenantId: string; role: string }>,
  csrf: string,
): string {
  const list =
    memberships.length === 0
      ? `<p role="status">You have no membership in any tenant, so there is nothing you can do here yet. Ask an
administrator of your tenant to add you (signbridge admin member add).</p>`
      : `<ul>${memberships.map((m) => `<li>${escapeHtml(m.tenantId)}: ${escapeHtml(m.role)}</li>`).join('')}</ul>`;
  return page(
    'Signed in',
    `<p>Signed in as ${escapeHtml(person)}.</p>
${list}
<form method="post" action="/oauth/logout">
<input type="hidden" name="${CSRF_FIELD}" value="${escapeHtml(csrf)}">
<button type="submit">Sign out</button>
</form>`,
  );
}

function formatShown(code: string): string {
  return `${code.slice(0, 4)}-${code.slice(4)}`;
}
