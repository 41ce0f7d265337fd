// `signbridge admin`: offline administration against the service's store (works while the service runs:
// SQLite in WAL mode takes writers from several processes).

import { createWriteStream, openSync } from 'node:fs';
import { userInfo } from 'node:os';
import type { Command } from 'commander';
import { TENANT_ID_PATTERN } from '../api/schemas.js';
import { createApiKey, rolesOf } from '../auth/api-keys.js';
import { accessKeyIdOf } from '../auth/aws-credentials/credential-format.js';
import { resolveConfig, type ServiceConfig } from '../config/config.js';
import { EventBuilder } from '../events/event-builder.js';
import { openStore } from '../open-stores.js';
import { loadPolicyFile } from '../policy/policy-file.js';
import { loadOsvPath } from '../policy/vulndb/osv.js';
import { verifyAuditChain } from '../store/audit/verify-chain.js';
import type { AuditAction, AuditOutcome } from '../store/records/audit-vocabulary.js';
import { isRole, ROLES, type Role } from '../store/records/roles.js';
import type { AuditEntryInputOf, Store } from '../store/store.js';
import { createAwsKeyFromCli, NoSealerError } from './admin-aws-key.js';
import { backupDataDir } from './admin-backup.js';
import { moveInstallation } from './admin-migrate.js';
import { createKeyForPerson, registerPeopleCommands } from './admin-people.js';
import { registerTrustCommands } from './admin-trust.js';
import { registerWebhookCommands } from './admin-webhooks.js';

interface PersonKeyFlags {
  forEmail?: string;
  expiresIn?: string;
}

interface KeyFormatFlags {
  format: string;
  profile: string;
}

/** An AWS-format key, audited as any key an admin makes. */
async function createAwsKey(
  store: Store,
  config: ServiceConfig,
  opts: KeyFormatFlags & { role: string; tenant?: string; label: string },
) {
  let made: Awaited<ReturnType<typeof createAwsKeyFromCli>>;
  try {
    made = await createAwsKeyFromCli(store, config, {
      role: opts.role as Role,
      tenantId: opts.tenant ?? null,
      label: opts.label,
      profile: opts.profile,
      events: new EventBuilder(store, undefined),
      by: cliActor(),
    });
  } catch (err) {
    if (err instanceof NoSealerError) throw new UsageError(err.message);
    throw err;
  }
  await store.audit.append(
    cliAudit(opts.tenant ?? null, 'api_key_create', 'created', {
      api_key_id: made.id,
      role: opts.role,
      label: opts.label,
      format: 'aws',
      access_key_id: made.accessKeyId,
    }),
  );
  return made;
}

interface StoreFlags {
  dataDir?: string;
  config?: string;
  database?: string;
}

async function withStore<T>(flags: StoreFlags, fn: (store: Store, config: ServiceConfig) => Promise<T>): Promise<T> {
  const config = resolveConfig({ dataDir: flags.dataDir, configFile: flags.config, database: flags.database });
  const store = await openStore(config);
  try {
    return await fn(store, config);
  } finally {
    await store.close();
  }
}

export class UsageError extends Error {}

/** Offline administration is audited as "cli:<OS user>": there is no API key behind it. */
/** Who acts from the command line: the operating-system user. */
function cliActor(): string {
  return `cli:${userInfo().username}`;
}

function cliAudit<A extends AuditAction>(
  tenantId: string | null,
  action: A,
  outcome: AuditOutcome<A>,
  details: Record<string, unknown>,
): AuditEntryInputOf<A> {
  return { at: new Date().toISOString(), tenantId, actor: cliActor(), action, outcome, details };
}

export function storeOptions(cmd: Command): Command {
  return cmd
    .option('--data-dir <dir>', 'state folder (env SIGNBRIDGE_DATA_DIR)')
    .option('--config <file>', 'configuration file')
    .option('--database <url>', 'PostgreSQL URL postgres://... (env SIGNBRIDGE_DATABASE_URL)');
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
    .option('--for-email <email>', "a CI key for this person, within their membership's roles (needs --expires-in)")
    .option('--expires-in <duration>', 'with --for-email: lifetime such as 12h or 90d (at most 366d)')
    .option(
      '--format <format>',
      'token (a Bearer key, sbk_...) or aws (an access key id and secret for AWS clients, printed as a section of ' +
        '~/.aws/credentials; docs/kms-api.md)',
      'token',
    )
    .option('--profile <name>', 'with --format aws: the credentials section name', 'signbridge')
    .action(
      async (opts: StoreFlags & PersonKeyFlags & KeyFormatFlags & { role: string; tenant?: string; label: string }) => {
        if (!isRole(opts.role)) throw new UsageError(`--role must be one of: ${ROLES.join(', ')}`);
        if (opts.format !== 'token' && opts.format !== 'aws') throw new UsageError('--format must be token or aws');
        if (opts.format === 'aws' && opts.forEmail !== undefined) {
          throw new UsageError('--format aws makes an admin key; a person signs in with signbridge login');
        }
        if (!/^[A-Za-z0-9_.-]{1,64}$/.test(opts.profile)) throw new UsageError('--profile must be a plain name');
        if (opts.forEmail !== undefined) {
          const made = await withStore(opts, (store) =>
            createKeyForPerson(
              store,
              { ...opts, forEmail: opts.forEmail as string, role: opts.role as Role },
              cliAudit,
            ),
          );
          process.stderr.write(
            `created API key ${made.id} for ${made.person} (${opts.role}, expires ${made.expiresAt})\n`,
          );
          process.stdout.write(`${made.token}\n`);
          return;
        }
        if (opts.expiresIn !== undefined) throw new UsageError('--expires-in goes with --for-email');
        if (opts.role === 'operator' && opts.tenant) throw new UsageError('an operator key is global: omit --tenant');
        if (opts.role !== 'operator' && !opts.tenant) throw new UsageError(`a ${opts.role} key needs --tenant`);
        if (opts.tenant && !new RegExp(TENANT_ID_PATTERN).test(opts.tenant)) {
          throw new UsageError(`--tenant "${opts.tenant}" is not a valid tenant id`);
        }
        if (opts.format === 'aws') {
          const made = await withStore(opts, (store, config) => createAwsKey(store, config, opts));
          process.stderr.write(
            `created API key ${made.id} (${opts.role}${opts.tenant ? ` on ${opts.tenant}` : ''}), access key id ` +
              `${made.accessKeyId}; add this to ~/.aws/credentials and point the client at the service ` +
              `(AWS_ENDPOINT_URL_KMS=<service URL>)\n`,
          );
          process.stdout.write(made.section);
          return;
        }
        const { token, record } = await withStore(opts, async (store) => {
          const made = await createApiKey(store, opts.role as never, opts.tenant ?? null, opts.label, new Date(), {
            events: new EventBuilder(store, undefined),
            by: cliActor(),
          });
          await store.audit.append(
            cliAudit(opts.tenant ?? null, 'api_key_create', 'created', {
              api_key_id: made.record.id,
              role: made.record.role,
              label: made.record.label,
            }),
          );
          return made;
        });
        process.stderr.write(
          `created API key ${record.id} (${record.role}${record.tenantId ? ` on ${record.tenantId}` : ''})\n`,
        );
        process.stdout.write(`${token}\n`);
      },
    );

  storeOptions(apiKey.command('list'))
    .description('list API keys: id, roles, tenant, state, label and, for person keys, owner and expiry')
    .action(async (opts: StoreFlags) => {
      const keys = await withStore(opts, async (store) => {
        const people = new Map((await store.people.listPeople()).map((p) => [p.id, p]));
        return (await store.apiKeys.list()).map((k) => ({ k, owner: k.personId ? people.get(k.personId) : undefined }));
      });
      const now = Date.now();
      for (const { k, owner } of keys) {
        const expired = k.expiresAt && Date.parse(k.expiresAt) <= now;
        const state = k.revokedAt ? `revoked ${k.revokedAt}` : expired ? `expired ${k.expiresAt}` : 'active';
        // Columns 1-5 as before; person keys add their owner and expiry.
        const personCols = k.personId
          ? `\t${owner?.email ?? owner?.subject ?? k.personId}\t${k.expiresAt ? `expires ${k.expiresAt}` : ''}`
          : '';
        // An AWS-format key shows its access key id, which is what its users see and quote.
        const label = k.sealedSecret ? `${k.label} [aws ${accessKeyIdOf(k.id, k.createdVia === 'workload')}]` : k.label;
        process.stdout.write(
          `${k.id}\t${rolesOf(k).join(',')}\t${k.tenantId ?? '*'}\t${state}\t${label}${personCols}\n`,
        );
      }
    });

  storeOptions(apiKey.command('revoke'))
    .description('revoke an API key by id')
    .argument('<id>', 'the key id (the 16 hex characters after "sbk_")')
    .action(async (id: string, opts: StoreFlags) => {
      const revoked = await withStore(opts, async (store) => {
        const record = await store.apiKeys.get(id);
        const at = new Date().toISOString();
        const events = new EventBuilder(store, undefined);
        const done = await store.apiKeys.revoke(
          id,
          at,
          record && [await events.apiKey('api_key.revoked', { ...record, revokedAt: at }, cliActor())],
        );
        if (done)
          await store.audit.append(cliAudit(record?.tenantId ?? null, 'api_key_revoke', 'revoked', { api_key_id: id }));
        return done;
      });
      if (!revoked) throw new UsageError(`no active API key with id ${id}`);
      process.stderr.write(`revoked API key ${id}\n`);
    });

  registerPeopleCommands(admin, storeOptions, withStore, cliAudit);
  registerTrustCommands(admin, storeOptions, withStore);
  registerWebhookCommands(admin, storeOptions, withStore);

  storeOptions(admin.command('vulndb').description('the offline vulnerability database (OSV)').command('import'))
    .description('load OSV JSON records (a file with one record or an array, or a folder of them) into the store')
    .argument('<path>', 'file or folder')
    .action(async (path: string, opts: StoreFlags) => {
      const records = await loadOsvPath(path);
      const at = new Date().toISOString();
      const changed = await withStore(opts, async (store) => {
        const n = await store.vulnerabilities.put(
          records.map((r) => ({ id: r.id, modified: r.modified, record: JSON.stringify(r) })),
          at,
        );
        await store.audit.append(
          cliAudit(null, 'vulndb_import', 'imported', { path, records: records.length, changed: n }),
        );
        return n;
      });
      process.stdout.write(`imported ${records.length} OSV records from ${path} (${changed} new or changed)\n`);
    });

  const audit = admin.command('audit').description('the tamper-evident audit log');

  storeOptions(audit.command('verify'))
    .description(
      'check the hash chain; exits non-zero and names the first broken entry if any was edited, removed or reordered',
    )
    .action(async (opts: StoreFlags) => {
      const result = await withStore(opts, verifyAuditChain);
      if (result.problem) {
        throw new UsageError(
          `audit log broken at entry ${result.problem.seq}: ${result.problem.problem} (${result.count} entries before it verified)`,
        );
      }
      process.stdout.write(`audit log intact: ${result.count} entries, head ${result.head}\n`);
    });

  storeOptions(audit.command('export'))
    .description('write the audit log as JSON lines (stdout, or --out FILE)')
    .option('--out <file>', 'write to this file (created 0600) instead of stdout')
    .action(async (opts: StoreFlags & { out?: string }) => {
      // Open the file first, synchronously: a bad path is a clear error before anything is read.
      const fd = opts.out ? openSync(opts.out, 'w', 0o600) : undefined;
      const out = fd !== undefined ? createWriteStream('', { fd }) : process.stdout;
      const count = await withStore(opts, async (store) => {
        let after = 0;
        let n = 0;
        for (;;) {
          const page = await store.audit.read(after, 1000);
          if (page.length === 0) break;
          for (const e of page) {
            out.write(
              `${JSON.stringify({ seq: e.seq, at: e.at, tenant_id: e.tenantId, actor: e.actor, action: e.action, outcome: e.outcome, details: e.details, prev_hash: e.prevHash, hash: e.hash })}\n`,
            );
            n++;
          }
          after = (page.at(-1) as { seq: number }).seq;
        }
        return n;
      });
      if (opts.out) {
        await new Promise<void>((resolve, reject) =>
          (out as ReturnType<typeof createWriteStream>).end((err?: Error | null) => (err ? reject(err) : resolve())),
        );
      }
      process.stderr.write(`exported ${count} audit entries\n`);
    });

  admin
    .command('backup')
    .description(
      'copy a SQLite data dir while the service runs: the database (one consistent snapshot) and the token folder with its PINs',
    )
    .option('--data-dir <dir>', 'state folder (env SIGNBRIDGE_DATA_DIR)')
    .option('--config <file>', 'configuration file')
    .option('--database <url>', 'refused with the PostgreSQL procedure (pg_dump): this command copies SQLite data dirs')
    .requiredOption('--to <dir>', 'a new (or empty) folder for the copy; restore by copying it to a data dir')
    .action((opts: StoreFlags & { to: string }) => {
      const config = resolveConfig({ dataDir: opts.dataDir, configFile: opts.config, database: opts.database });
      const report = backupDataDir(config, opts.to);
      process.stdout.write(
        `backed up ${config.dataDir} to ${opts.to}: database in ${Math.round(report.databaseMs)} ms` +
          `${report.tokenFolder ? ', token folder (softhsm/, with its PIN files)' : ' (no token folder in the data dir)'}\n`,
      );
    });

  admin
    .command('migrate')
    .description(
      'move an installation from SQLite to PostgreSQL: every tenant, key, API key, approval, exception and the whole audit chain, verified',
    )
    .requiredOption('--from <sqlite:data-dir>', 'the installation to move: sqlite:<data dir> (or sqlite:<file.db>)')
    .requiredOption('--to <postgres-url>', 'an empty PostgreSQL database: postgres://user:password@host:port/db')
    .action(async (opts: { from: string; to: string }) => {
      const report = await moveInstallation(opts.from, opts.to, (m) => process.stderr.write(`${m}\n`));
      const moved = Object.entries(report.rows)
        .map(([table, n]) => `${table} ${n}`)
        .join(', ');
      process.stdout.write(
        `moved to PostgreSQL: ${moved}; audit chain verified on the target: ${report.auditEntries} entries, head ${report.auditHead}\n`,
      );
    });
}
