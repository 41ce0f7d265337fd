// The signing service as a command that calls it directly (`signbridge sign`, `signbridge digest`) finds it: the
// URL from --service-url, SIGNBRIDGE_SERVICE_URL or the last `signbridge login`, and the API key the way the daemon
// finds its own (daemon/config.ts): --api-key-file, SIGNBRIDGE_API_KEY_FILE, SIGNBRIDGE_API_KEY, the login's key.
// There is no --api-key VALUE flag: a command line is readable by every user of the machine (/proc/PID/cmdline).
import { resolve } from 'node:path';
import { type ApiKeySource, apiKeyFromEnv, apiKeyFromFile } from '../../daemon/credentials.js';
import { loginFilesInUse, readLoginMetadata } from '../../daemon/login-files.js';
import { LoginSession } from '../../daemon/login-session.js';
import { RemoteUpstream } from '../../daemon/upstream/remote-upstream.js';
import { type CiFlags, idTokenSourceFor } from './ci/ci-options.js';
import { exchangeIdToken } from './ci/exchange.js';
import { serviceBaseUrl } from './login/service-http.js';

export interface ServiceFlags extends CiFlags {
  serviceUrl?: string;
  apiKeyFile?: string;
  insecureHttp?: boolean;
  /** Seconds one request may take (default 30). */
  timeout?: string;
}

export class ServiceClientError extends Error {}

export function openServiceClient(flags: ServiceFlags, env: NodeJS.ProcessEnv = process.env): RemoteUpstream {
  const { base, apiKey, timeoutMs } = resolveService(flags, env);
  return new RemoteUpstream({ url: base.href, apiKey, timeoutMs, userAgent: 'signbridge-cli' });
}

/** The service's base URL and the API key, found as for `sign`; both checked, the key not read yet. */
export function resolveService(
  flags: ServiceFlags,
  env: NodeJS.ProcessEnv = process.env,
): { base: URL; apiKey: ApiKeySource; apiKeyGiven: boolean; timeoutMs: number } {
  const files = loginFilesInUse(env);
  let loginUrl: string | undefined;
  try {
    loginUrl = readLoginMetadata(files)?.service_url;
  } catch {
    loginUrl = undefined; // a broken login.json: the URL must come from elsewhere
  }
  // An empty variable counts as unset, as in the daemon.
  const given = flags.serviceUrl ?? (env.SIGNBRIDGE_SERVICE_URL || loginUrl);
  if (!given) {
    throw new ServiceClientError(
      'no service: pass --service-url URL, set SIGNBRIDGE_SERVICE_URL, or run `signbridge login --service-url URL`',
    );
  }
  let base: URL;
  try {
    base = serviceBaseUrl(given, flags.insecureHttp === true);
  } catch (err) {
    throw new ServiceClientError((err as Error).message);
  }
  let apiKey: ApiKeySource;
  const keyFile = flags.apiKeyFile ?? env.SIGNBRIDGE_API_KEY_FILE;
  try {
    if (keyFile) apiKey = apiKeyFromFile(resolve(keyFile));
    else if (env.SIGNBRIDGE_API_KEY) apiKey = apiKeyFromEnv(env.SIGNBRIDGE_API_KEY);
    else apiKey = new LoginSession(files).apiKeySource();
  } catch (err) {
    throw new ServiceClientError(
      `no API key (${(err as Error).message}): pass --api-key-file FILE (mode 600), set SIGNBRIDGE_API_KEY, ` +
        'or run `signbridge login`',
    );
  }
  // Not given: the login's key, which may not exist (a public log needs none).
  return { base, apiKey, apiKeyGiven: Boolean(keyFile || env.SIGNBRIDGE_API_KEY), timeoutMs: timeoutMs(flags) };
}

/**
 * `--ci`: the job's ID token exchanged for a key of `tenantId` that lives in this process only (one command signs
 * well within the key's life). The service URL from --service-url or SIGNBRIDGE_SERVICE_URL.
 */
export async function openCiServiceClient(
  flags: ServiceFlags,
  tenantId: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<RemoteUpstream> {
  const given = flags.serviceUrl ?? env.SIGNBRIDGE_SERVICE_URL;
  if (!given) throw new ServiceClientError('--ci: pass --service-url URL (or set SIGNBRIDGE_SERVICE_URL)');
  let base: URL;
  try {
    base = serviceBaseUrl(given, flags.insecureHttp === true);
  } catch (err) {
    throw new ServiceClientError((err as Error).message);
  }
  const timeout = timeoutMs(flags);
  const idTokens = idTokenSourceFor(flags, base.href, env);
  const key = await exchangeIdToken({ serviceUrl: base.href, tenantId, idToken: await idTokens.get() });
  return new RemoteUpstream({
    url: base.href,
    apiKey: { description: `CI token exchange (${idTokens.description})`, get: () => key.apiKey },
    timeoutMs: timeout,
    userAgent: 'signbridge-cli',
  });
}

function timeoutMs(flags: ServiceFlags): number {
  const seconds = flags.timeout === undefined ? 30 : Number(flags.timeout);
  if (!Number.isFinite(seconds) || seconds <= 0) {
    throw new ServiceClientError(`--timeout must be a positive number of seconds, got ${flags.timeout}`);
  }
  return Math.round(seconds * 1000);
}
