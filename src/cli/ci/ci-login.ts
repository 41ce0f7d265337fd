// `signbridge login --ci`: exchange the CI job's ID token for a short-lived key and keep it where the daemon and
// `signbridge sign` find it (daemon/login-files.ts ciLoginFiles: the job's runtime folder, 0700, the key 0600),
// with the login metadata beside it. Prints where it is and when it expires, never the key or the token.
import { ciLoginFiles, writeLogin } from '../../../daemon/login-files.js';
import { fmt } from '../login/progress.js';
import { serviceBaseUrl } from '../login/service-http.js';
import { type CiFlags, idTokenSourceFor } from './ci-options.js';
import { exchangeIdToken } from './exchange.js';

export interface CiLoginFlags extends CiFlags {
  serviceUrl?: string;
  tenant?: string;
  insecureHttp?: boolean;
}

const say = (line: string) => process.stderr.write(`${line}\n`);

export async function loginWithCiToken(flags: CiLoginFlags, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const given = flags.serviceUrl ?? env.SIGNBRIDGE_SERVICE_URL;
  if (!given || !flags.tenant) {
    say('signbridge login --ci: pass --service-url URL and --tenant ID (the tenant whose trust rules take the token)');
    return 2;
  }
  const files = ciLoginFiles(env);
  let serviceUrl: string;
  try {
    serviceUrl = serviceBaseUrl(given, flags.insecureHttp === true).href;
  } catch (err) {
    say(`signbridge login --ci: ${(err as Error).message}`);
    return 2;
  }
  try {
    const idTokens = idTokenSourceFor(flags, serviceUrl, env);
    const key = await exchangeIdToken({
      serviceUrl,
      tenantId: flags.tenant,
      idToken: await idTokens.get(),
      onRetry: (why, waitMs) => say(`signbridge login --ci: ${why}; asking again in ${fmt(waitMs / 1000)}`),
    });
    writeLogin(files, key.apiKey, {
      service_url: serviceUrl.replace(/\/$/, ''),
      tenant_id: key.tenantId,
      roles: [key.role],
      email: null,
      expires_at: new Date(key.expiresAt).toISOString(),
      created_at: new Date().toISOString(),
    });
    say(
      `Exchanged the job's ID token (${idTokens.description}) for a ${key.role} key of tenant ${key.tenantId}; ` +
        `it expires at ${new Date(key.expiresAt).toISOString()} (in ${fmt(key.lifetimeS)}).`,
    );
    say(`Stored in ${files.keyFile} (mode 600); \`signbridge daemon\` and \`signbridge sign\` use it.`);
    return 0;
  } catch (err) {
    say(`signbridge login --ci: ${(err as Error).message}`);
    return 1;
  }
}
