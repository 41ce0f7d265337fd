// Once per test run: compile the CLI (the CLI tests run bin/signbridge.js -> dist/), and start a private PostgreSQL
// cluster that every PostgreSQL test shares (each test file makes its own database on it).
import { execFileSync } from 'node:child_process';
import { type PostgresCluster, postgresBinDir, startPostgresCluster } from './helpers/postgres.js';

let cluster: PostgresCluster | undefined;

export default async function setup(): Promise<() => void> {
  execFileSync('node_modules/.bin/tsc', ['-p', 'tsconfig.build.json'], { stdio: 'inherit' });
  if (postgresBinDir()) {
    cluster = await startPostgresCluster();
    // Test files run in forked processes started after this: they inherit it.
    process.env.SIGNBRIDGE_TEST_POSTGRES_URL = cluster.url;
  } else if (process.env.SIGNBRIDGE_REQUIRE_POSTGRES === '1') {
    throw new Error('PostgreSQL is not installed: run scripts/setup.sh (it installs postgresql from Debian)');
  } else {
    console.warn('PostgreSQL is not installed: the PostgreSQL tests are skipped (scripts/setup.sh installs it)');
  }
  return () => cluster?.stop();
}
