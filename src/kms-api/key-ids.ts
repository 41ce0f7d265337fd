// KMS key ids on signbridge (docs/kms-api.md, "Key ids"): a tenant is an AWS account of its own, its current key is
// `alias/<tenant>`, and every key version is a KMS key whose id is the version's id (a UUID, as AWS's key ids are).
// ARNs take AWS's form with the tenant id where AWS has the account: `arn:aws:kms:<region>:<tenant>:key/<key id>` and
// `arn:aws:kms:<region>:<tenant>:alias/<tenant>`. Any region is accepted; answers name the caller's region.

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const ARN = /^arn:aws[a-z-]*:kms:([a-z0-9-]{1,64}):([^:]+):(key|alias)\/(.+)$/;

/** What a KeyId names, before any lookup. */
export type KeyName =
  /** alias/<tenant> names the tenant's current key; an ARN's alias of another name in that account names nothing. */
  | { kind: 'alias'; tenantId: string; alias: string }
  /** A key version by id; tenantId when an ARN said it, else the caller's tenant applies. */
  | { kind: 'key'; keyId: string; tenantId?: string };

export function parseKeyName(text: string): KeyName | undefined {
  const arn = ARN.exec(text);
  if (arn) {
    const [, , account, type, rest] = arn as unknown as [string, string, string, 'key' | 'alias', string];
    if (type === 'key') return UUID.test(rest) ? { kind: 'key', keyId: rest, tenantId: account } : undefined;
    return { kind: 'alias', tenantId: account, alias: `alias/${rest}` };
  }
  if (text.startsWith('alias/')) {
    const tenantId = text.slice('alias/'.length);
    return tenantId.length > 0 ? { kind: 'alias', tenantId, alias: text } : undefined;
  }
  return UUID.test(text) ? { kind: 'key', keyId: text } : undefined;
}

export function keyArn(region: string, tenantId: string, keyId: string): string {
  return `arn:aws:kms:${region}:${tenantId}:key/${keyId}`;
}

export function aliasArn(region: string, tenantId: string): string {
  return `arn:aws:kms:${region}:${tenantId}:alias/${tenantId}`;
}

/** Only alias/<tenant> exists in a tenant's account. */
export function aliasExists(name: Extract<KeyName, { kind: 'alias' }>): boolean {
  return name.alias === `alias/${name.tenantId}`;
}
