// `signbridge admin migrate --from sqlite:<data-dir> --to postgres://...` (src/store/move-store.ts does the work).
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { verifyAuditChain } from '../store/audit/verify-chain.js';
import { MoveError, type MoveReport, moveStore } from '../store/move-store.js';
import { openPostgresStore, postgresUrlProblem } from '../store/postgres/postgres-store.js';
import { openSqliteStore } from '../store/sqlite/sqlite-store.js';

/** The SQLite file of `sqlite:<data dir>` or `sqlite:<file>`. */
function sqliteFile(from: string): string {
  if (!from.startsWith('sqlite:')) throw new MoveError('--from must be sqlite:<data dir> (or sqlite:<file.db>)');
  const path = from.slice('sqlite:'.length);
  const file = existsSync(path) && statSync(path).isDirectory() ? join(path, 'signbridge.db') : path;
  if (!existsSync(file)) throw new MoveError(`--from: no SQLite store at ${file}`);
  return file;
}

export async function moveInstallation(from: string, to: string, progress: (m: string) => void): Promise<MoveReport> {
  const problem = postgresUrlProblem(to);
  if (problem) throw new MoveError(`--to ${problem}`);
  const source = openSqliteStore(sqliteFile(from));
  const target = openPostgresStore(to);
  try {
    await source.migrate(); // brings an older installation's schema up to date first
    const chain = await verifyAuditChain(source);
    if (chain.problem) {
      throw new MoveError(
        `the source audit chain is broken at entry ${chain.problem.seq} (${chain.problem.problem}); not moving it`,
      );
    }
    progress(`source audit chain verified: ${chain.count} entries`);
    await target.migrate();
    return await moveStore(source, target, progress);
  } finally {
    await target.close();
    await source.close();
  }
}
