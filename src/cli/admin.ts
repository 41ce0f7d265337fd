// `signbridge admin`: offline administration against the service's store (works while the service runs:
// SQLite in WAL mode takes writers from several processes).
import type { Command } from 'commander';
import { TENANT_ID_PATTERN } from '../api/schemas.js';
import { createApiKey } from '../auth/api-keys.js';
import { isRole, ROLES } from '../auth/roles.js';
import { resolveConfig } from '../config/config.js';
import { loadPolicyFile } from '../policy/policy-file.js';
import { openStore } from '../server.js';
import type { Store } from '../store/store.js';

interface StoreFlags {
  dataDir?: string;
  config?: string;
}

async function withStore<T>(flags: StoreFlags, fn: (store: Store) => Promise<T>): Promise<T> {
  const config = resolveConfig({ dataDir: flags.dataDir, configFile: flags.config });
  const store = await openStore(config);
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

export class UsageError extends Error {}

function storeOptions(cmd: Command): Command {
  return cmd
    .option('--data-dir <dir>', 'state folder (env SIGNBRIDGE_DATA_DIR)')
    .option('--config <file>', 'configuration file');
}

export function registerAdminCommands(program: Command): void {
  const admin = program.command('admin').description('administer API keys, policy and tenants');

  admin
    .command('policy')
    .description('policy documents')
    .command('check')
    .description('validate a policy document without starting the service')
    .argument('<file>', 'YAML or JSON policy document (docs/policy.md)')
    .action((file: string) => {
      const doc = loadPolicyFile(file);
      const tenants = Object.keys(doc.tenants ?? {});
      process.stdout.write(
        `${file}: valid policy (version ${doc.version}; ${tenants.length} tenant override(s)${tenants.length ? `: ${tenants.join(', ')}` : ''})\n`,
      );
    });

  const apiKey = admin.command('api-key').description('manage API keys');

  storeOptions(apiKey.command('create'))
    .description('create an API key and print it alone on stdout (it is shown only this once)')
    .requiredOption('--role <role>', `one of: ${ROLES.join(', ')}`)
    .option('--tenant <tenant>', 'tenant the key acts for (required for every role but operator)')
    .option('--label <label>', 'a note to recognise the key by', '')
    .action(async (opts: StoreFlags & { role: string; tenant?: string; label: string }) => {
      if (!isRole(opts.role)) throw new UsageError(`--role must be one of: ${ROLES.join(', ')}`);
      if (opts.role === 'operator' && opts.tenant) throw new UsageError('an operator key is global: omit --tenant');
      if (opts.role !== 'operator' && !opts.tenant) throw new UsageError(`a ${opts.role} key needs --tenant`);
      if (opts.tenant && !new RegExp(TENANT_ID_PATTERN).test(opts.tenant)) {
        throw new UsageError(`--tenant "${opts.tenant}" is not a valid tenant id`);
      }
      const { token, record } = await withStore(opts, (store) =>
        createApiKey(store, opts.role as never, opts.tenant ?? null, opts.label),
      );
      process.stderr.write(
        `created API key ${record.id} (${record.role}${record.tenantId ? ` on ${record.tenantId}` : ''})\n`,
      );
      process.stdout.write(`${token}\n`);
    });

  storeOptions(apiKey.command('list'))
    .description('list API keys (ids and roles; secrets are never stored)')
    .action(async (opts: StoreFlags) => {
      const keys = await withStore(opts, (store) => store.listApiKeys());
      for (const k of keys) {
        const state = k.revokedAt ? `revoked ${k.revokedAt}` : 'active';
        process.stdout.write(`${k.id}\t${k.role}\t${k.tenantId ?? '*'}\t${state}\t${k.label}\n`);
      }
    });

  storeOptions(apiKey.command('revoke'))
    .description('revoke an API key by id')
    .argument('<id>', 'the key id (the 16 hex characters after "sbk_")')
    .action(async (id: string, opts: StoreFlags) => {
      const revoked = await withStore(opts, (store) => store.revokeApiKey(id, new Date().toISOString()));
      if (!revoked) throw new UsageError(`no active API key with id ${id}`);
      process.stderr.write(`revoked API key ${id}\n`);
    });
}
