// Service instances that share one PostgreSQL database, as several `signbridge server` processes behind a load
// balancer do: a fresh database of the test cluster, one data directory and config file, a webhook receiver, and
// the real CLI run on the database as an operator runs it (a process of its own, so that it never holds this
// process's event loop, where the receiver answers).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { runCliAsync, type ServerProcess, startServerProcess } from './cli.js';
import { createTestDatabase } from './postgres.js';
import { makeTempDir } from './service.js';
import { WebhookReceiver } from './webhook-receiver.js';

export class InstancesOnPostgres {
  readonly dataDir = makeTempDir();
  readonly config = join(this.dataDir, 'config.yaml');
  readonly receiver = new WebhookReceiver();
  database = '';
  /** A connection of the test's own, to look at the rows the instances wrote. */
  db: pg.Client | undefined;

  constructor(private readonly env: Record<string, string>) {}

  /** Creates the database, writes the config file, starts the receiver and `count` instances. */
  async open(databaseName: string, configYaml: string, count: number): Promise<ServerProcess[]> {
    this.database = createTestDatabase(databaseName);
    this.db = new pg.Client({ connectionString: this.database });
    await this.db.connect();
    writeFileSync(this.config, configYaml);
    await this.receiver.start();
    return Promise.all(Array.from({ length: count }, () => this.start()));
  }

  /** One more instance on the same database, data directory and config. */
  start(): Promise<ServerProcess> {
    return startServerProcess(
      ['--config', this.config, '--data-dir', this.dataDir, '--database', this.database],
      this.env,
    );
  }

  /** `signbridge admin ...` on the database. */
  admin(...args: string[]) {
    return runCliAsync(['admin', ...args, '--database', this.database], this.env);
  }

  async query<Row extends pg.QueryResultRow>(text: string): Promise<Row[]> {
    if (!this.db) throw new Error('InstancesOnPostgres.open() was not called');
    return (await this.db.query<Row>(text)).rows;
  }

  /** Stops the receiver and the test's connection (the caller stops its instances first, each as it needs). */
  async close(): Promise<void> {
    await this.receiver.stop();
    await this.db?.end();
  }
}
