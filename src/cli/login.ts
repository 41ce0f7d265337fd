// `signbridge login` / `signbridge logout` on a build host: sign in through the service's device flow (the person
// confirms in a browser, on this machine or any other) and keep the API key where the daemon reads it
// (daemon/login-files.ts); logout revokes it at the service and removes it. Everything for people goes to stderr;
// nothing secret is ever printed.
import { hostname, userInfo } from 'node:os';
import type { Command } from 'commander';
import {
  defaultLoginFiles,
  LoginFileError,
  type LoginMetadata,
  preparePrivateDir,
  readLoginKey,
  readLoginMetadata,
  removeLogin,
  writeLogin,
} from '../../daemon/login-files.js';
import { loginWithCiToken } from './ci/ci-login.js';
import { addCiOptions, type CiFlags, ciEnabled } from './ci/ci-options.js';
import { type DeviceGrant, type DeviceStart, LoginError, runDeviceFlow } from './login/device-flow.js';
import { openBrowser } from './login/open-browser.js';
import { fmt, WaitingLine } from './login/progress.js';

import { serviceBaseUrl } from './login/service-http.js';
import { revokeKey } from './login/session-api.js';

interface LoginFlags extends CiFlags {
  serviceUrl?: string;
  tenant?: string;
  browser: boolean;
  insecureHttp?: boolean;
}

const say = (line: string) => process.stderr.write(`${line}\n`);

export function registerLoginCommands(program: Command): void {
  const command = program
    .command('login')
    .description(
      'sign in through the service (device flow: confirm a code in a browser) and store an API key for the daemon',
    )
    .option(
      '--service-url <url>',
      'signing service base URL (default: env SIGNBRIDGE_SERVICE_URL, else the service of the last login)',
    )
    .option('--tenant <id>', 'the tenant to sign in for (default: the service asks when there are several)')
    .option('--no-browser', 'only print the page and the code; open them on any device')
    .option('--insecure-http', 'allow a plain http:// service URL to another host (the key would travel unencrypted)')
    .addHelpText(
      'after',
      '\nWrites ~/.config/signbridge/api-key (0600) and login.json ($XDG_CONFIG_HOME/signbridge when set); a\n' +
        'running `signbridge daemon` uses the new key at its next request (docs/daemon.md, "Signing in").\n' +
        "With --ci: exchanges the CI job's ID token instead and writes the key to the job's runtime folder\n" +
        '($RUNNER_TEMP/signbridge, else $XDG_RUNTIME_DIR/signbridge-ci, else a private folder in /tmp; docs/ci.md).',
    );
  addCiOptions(command).action(async (flags: LoginFlags) => {
    process.exitCode = ciEnabled(flags) ? await loginWithCiToken(flags) : await login(flags);
  });

  program
    .command('logout')
    .description('revoke the API key from `signbridge login` at the service and remove it from this host')
    .action(async () => {
      process.exitCode = await logout();
    });
}

async function login(flags: LoginFlags): Promise<number> {
  const files = defaultLoginFiles();
  let previous: LoginMetadata | undefined;
  try {
    previous = readLoginMetadata(files);
  } catch {
    // a broken login.json is replaced below
  }
  const given = flags.serviceUrl ?? (process.env.SIGNBRIDGE_SERVICE_URL || previous?.service_url);
  if (!given) {
    say('signbridge login: pass --service-url URL (the signing service, e.g. https://signbridge.example.com)');
    return 2;
  }
  let base: URL;
  try {
    base = serviceBaseUrl(given, flags.insecureHttp === true);
    preparePrivateDir(files.dir); // before the person signs in, not after
  } catch (err) {
    say(`signbridge login: ${(err as Error).message}`);
    return 2;
  }

  const cancel = new AbortController();
  const onSigint = () => cancel.abort();
  process.on('SIGINT', onSigint);
  const waiting = new WaitingLine(process.stderr);
  let grant: DeviceGrant;
  try {
    grant = await runDeviceFlow({
      base,
      ...(flags.tenant !== undefined && { tenant: flags.tenant }),
      clientName: `signbridge login on ${hostname()} (${safeUser()})`,
      signal: cancel.signal,
      events: {
        onCode: (start) => showCode(start, flags.browser),
        onWaiting: (left) => waiting.update(left),
        onRetry: (why, waitS) =>
          waiting.note(`the service did not answer properly (${why}); trying again in ${fmt(waitS)}`),
        onSlowDown: (intervalS) => waiting.note(`the service asked to poll less often: every ${fmt(intervalS)} now`),
      },
    });
  } catch (err) {
    waiting.clear();
    if (cancel.signal.aborted) {
      say('signbridge login: cancelled; nothing was written');
      return 130;
    }
    if (err instanceof LoginError) {
      say(`signbridge login: ${err.message}`);
      return 1;
    }
    throw err;
  } finally {
    process.off('SIGINT', onSigint);
  }
  waiting.clear();

  if (flags.tenant !== undefined && grant.tenantId !== flags.tenant) {
    say(`signbridge login: note: the service granted tenant ${grant.tenantId}, not ${flags.tenant}`);
  }
  try {
    writeLogin(files, grant.apiKey, {
      service_url: base.href.replace(/\/$/, ''),
      tenant_id: grant.tenantId,
      roles: grant.roles,
      email: grant.email,
      expires_at: grant.expiresAt,
      created_at: new Date().toISOString(),
    });
  } catch (err) {
    say(`signbridge login: signed in, but the key could not be stored: ${(err as Error).message}`);
    return 1;
  }
  const who = grant.email ?? 'signed in';
  const roles = grant.roles.length > 0 ? ` (${grant.roles.join(', ')})` : '';
  say(`Signed in: ${who}, tenant ${grant.tenantId}${roles}; the key ${expiryText(grant.expiresAt)}.`);
  say(`Stored in ${files.keyFile} (mode 600); a running daemon uses it from its next request.`);
  return 0;
}

function showCode(start: DeviceStart, browser: boolean): void {
  say('To sign in, open this page in a browser (on this machine or any other):');
  say(`    ${start.verificationUri}`);
  say(`and confirm the code:  ${start.userCode}`);
  say(`Confirm only if the page shows exactly this code. It expires in ${fmt(start.expiresInS)}.`);
  if (browser && openBrowser(start.verificationUriComplete ?? start.verificationUri)) say('(opening a browser)');
}

async function logout(): Promise<number> {
  const files = defaultLoginFiles();
  let meta: LoginMetadata | undefined;
  let key: string | undefined;
  let unreadable: string | undefined;
  try {
    key = readLoginKey(files);
    meta = readLoginMetadata(files);
  } catch (err) {
    if (!(err instanceof LoginFileError)) throw err;
    unreadable = err.message;
  }
  if (!key && !unreadable) {
    removeLogin(files);
    say(`signbridge logout: not signed in (no key at ${files.keyFile})`);
    return 0;
  }
  let problem: string | undefined;
  if (!key || !meta) {
    problem = `the key could not be revoked: ${unreadable ?? `${files.metadataFile} is missing, so the service is unknown`}`;
  } else {
    const result = await revokeKey(
      new URL(meta.service_url.endsWith('/') ? meta.service_url : `${meta.service_url}/`),
      key,
    );
    if (result.kind === 'failed') {
      problem =
        `the key could not be revoked at ${meta.service_url} (${result.why}); it stays valid ` +
        `${meta.expires_at ? `until ${meta.expires_at}` : 'without expiry'} unless an admin revokes it ` +
        '(`signbridge admin api-key revoke`)';
    } else if (result.kind === 'not-valid') {
      say(`signbridge logout: the service no longer accepted the key (${result.why})`);
    } else {
      say(`signbridge logout: the key was revoked at ${meta.service_url}`);
    }
  }
  removeLogin(files);
  if (problem) {
    say(`signbridge logout: ${problem}`);
    say(`signbridge logout: the local files were removed (${files.keyFile}, ${files.metadataFile})`);
    return 1;
  }
  say(`signbridge logout: removed ${files.keyFile} and ${files.metadataFile}`);
  return 0;
}

export function expiryText(expiresAt: string | null, now = Date.now()): string {
  if (!expiresAt) return 'does not expire';
  const left = Math.round((Date.parse(expiresAt) - now) / 1000);
  return left <= 0 ? `expired at ${expiresAt}` : `expires at ${expiresAt} (in ${fmt(left)})`;
}

function safeUser(): string {
  try {
    return userInfo().username;
  } catch {
    return `uid ${process.getuid?.() ?? '?'}`;
  }
}
