// The console's page frame and small HTML pieces: server-rendered, no scripts (the CSP forbids them), every
// input labelled, tables with captions and header scopes, a skip link and a visible focus ring for the keyboard.
// Everything interpolated goes through escapeHtml; `Html` marks strings that are already markup.
import { escapeHtml } from '../auth/oidc/pages.js';
import { CSRF_FIELD } from '../auth/oidc/sessions.js';

/** HTML pages: no caching, no framing (clickjacking a Confirm button), no scripts, no referrer (URLs carry codes). */
export const PAGE_HEADERS = {
  'cache-control': 'no-store',
  'content-security-policy':
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'x-content-type-options': 'nosniff',
};

export { escapeHtml };

/** Already-escaped markup, so a plain string is never inserted unescaped by mistake. */
export class Html {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value;
  }
}

/** Tagged template: interpolations are escaped unless they are Html (or arrays of Html). */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Html {
  let out = strings[0] as string;
  values.forEach((v, i) => {
    out += render(v) + (strings[i + 1] as string);
  });
  return new Html(out);
}

function render(v: unknown): string {
  if (v instanceof Html) return v.value;
  if (Array.isArray(v)) return v.map(render).join('');
  if (v === null || v === undefined || v === false) return '';
  return escapeHtml(String(v));
}

export interface Frame {
  title: string;
  /** The signed-in person, shown in the header with the sign-out form. */
  who?: string;
  csrf?: string;
  /** A one-line outcome of the last action (POST-redirect-GET), read aloud by screen readers. */
  notice?: string;
}

const STYLE = `body{font-family:system-ui,sans-serif;margin:0;line-height:1.5;color:#1b1b1b}
header,main{max-width:72rem;margin:0 auto;padding:0 1rem}
header{display:flex;flex-wrap:wrap;gap:1rem;align-items:center;justify-content:space-between;border-bottom:1px solid #ccc}
nav ul{display:flex;gap:1rem;list-style:none;padding:0;margin:.5rem 0}
table{border-collapse:collapse;width:100%;margin:1rem 0}th,td{border:1px solid #bbb;padding:.3rem .5rem;text-align:left;vertical-align:top}
caption{text-align:left;font-weight:bold;padding:.3rem 0}
td code{word-break:break-all}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}dt{font-weight:bold}dd{margin:0}
article{border:1px solid #bbb;padding:0 1rem 1rem;margin:1rem 0}
.notice{background:#e6f4ea;border-left:4px solid #1e7e34;padding:.5rem 1rem}
.problem{background:#fdecea;border-left:4px solid #b00020;padding:.5rem 1rem}
.secret{font-family:ui-monospace,monospace;background:#fff8e1;padding:.5rem;word-break:break-all;display:block}
form.inline{display:inline}fieldset{margin:1rem 0}label{display:block;margin-top:.4rem}
button,input,select,textarea{font-size:1em;padding:.3em .6em}
a:focus,button:focus,input:focus,select:focus,textarea:focus{outline:3px solid #1a5fb4;outline-offset:2px}
.skip{position:absolute;left:-999px}.skip:focus{left:1rem;top:1rem;background:#fff}`;

export function csrfInput(token: string): Html {
  return html`<input type="hidden" name="${CSRF_FIELD}" value="${token}">`;
}

export function consolePage(frame: Frame, body: Html): string {
  const account = frame.who
    ? html`<p>Signed in as <strong>${frame.who}</strong></p>
<form method="post" action="/oauth/logout" class="inline">${csrfInput(frame.csrf ?? '')}<button type="submit">Sign out</button></form>`
    : '';
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(frame.title)} - signbridge console</title>
<style>${STYLE}</style>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header>
<nav aria-label="Console">
<ul>
<li><a href="/console">Overview</a></li>
<li><a href="/console/requests">Pending requests</a></li>
<li><a href="/console/keys">My API keys</a></li>
</ul>
</nav>
${account}
</header>
<main id="main">
<h1>${escapeHtml(frame.title)}</h1>
${frame.notice ? `<p class="notice" role="status">${escapeHtml(frame.notice)}</p>` : ''}
${body.value}
</main>
</body>
</html>
`;
}

/** A page that says what went wrong (403 without the role, 404, a refused decision) and where to go. */
export function problemPage(frame: Frame, message: string): string {
  return consolePage(
    frame,
    html`<p class="problem" role="alert">${message}</p><p><a href="/console">Back to the overview</a></p>`,
  );
}

/** "3 h 20 min" style durations for ages and time left. */
export function humanDuration(ms: number): string {
  const past = ms < 0;
  const m = Math.floor(Math.abs(ms) / 60_000);
  const text =
    m < 1
      ? 'under a minute'
      : m < 60
        ? `${m} min`
        : m < 48 * 60
          ? `${Math.floor(m / 60)} h ${m % 60} min`
          : `${Math.floor(m / 1440)} days`;
  return past ? `${text} ago` : text;
}

export function time(iso: string | null | undefined): Html {
  return iso ? html`<time datetime="${iso}">${iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z')}</time>` : html`-`;
}
