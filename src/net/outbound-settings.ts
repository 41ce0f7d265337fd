// The settings of an outbound client (webhooks.*, workload.*): which special-use hosts it may reach and which extra
// trust anchors it takes, checked at start so a wrong entry or a missing file stops the start, not every request later.
import { readFileSync } from 'node:fs';
import { ConfigError } from '../config-error.js';
import { invalidAllowEntries } from './outbound-request.js';

/** A comma list or a YAML list of hosts, IP addresses and CIDRs; an entry that is none of them stops the start. */
export function allowSetting(source: string | string[] | undefined, setting: string): string[] {
  const allow = (typeof source === 'string' ? source.split(',') : (source ?? []))
    .map((entry) => entry.trim())
    .filter((entry) => entry.length > 0);
  const invalid = invalidAllowEntries(allow);
  if (invalid.length > 0) {
    throw new ConfigError(
      `${setting}: ${invalid.map((e) => JSON.stringify(e)).join(', ')} is not a host name, an IP address or a CIDR`,
    );
  }
  return allow;
}

/** A PEM file of extra trust anchors, read now: a missing or unreadable file stops the start, not every request later. */
export function caFileSetting(caFile: string | undefined, setting: string): string | undefined {
  if (!caFile) return undefined;
  let caPem: string;
  try {
    caPem = readFileSync(caFile, 'utf8');
  } catch (err) {
    throw new ConfigError(`${setting} ${caFile} cannot be read: ${(err as Error).message}`);
  }
  if (!caPem.includes('-----BEGIN CERTIFICATE-----'))
    throw new ConfigError(`${setting} ${caFile} holds no PEM certificate`);
  return caPem;
}
