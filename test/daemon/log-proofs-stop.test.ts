// The daemon's shutdown with proofs still awaited (daemon/log-proofs.ts, LogProofKeeper.stop): it does not hold the
// shutdown for the minute a proof may be asked for. Each is asked for once more at once, and one the log has not
// taken yet is given up with a warning that names the log index to fetch it by later (audit prove --index). The
// upstream here is a double whose log never holds the entry: what the real service answers (404 not yet logged)
// while its integrator is behind.
import { mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LogProofKeeper } from '../../daemon/log-proofs.js';

describe('LogProofKeeper.stop', () => {
  it('asks once more at once, then gives up what is not logged, naming its index', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sb-proofs-'));
    const asks: number[] = [];
    const warnings: string[] = [];
    const keeper = new LogProofKeeper({
      upstream: {
        inclusionProof: async (_tenant: string, index: number) => {
          asks.push(index);
          return 'not-yet' as const;
        },
      },
      dirFor: () => dir,
      log: {
        warn: (fields: object, message: string) => warnings.push(`${message} ${JSON.stringify(fields)}`),
        info: () => undefined,
      } as never,
    });
    keeper.keep('t', 41, Buffer.from('service'), Buffer.from('module'));
    keeper.keep('t', 42, Buffer.from('service 2'), Buffer.from('module 2'));
    // The first ask waits half a second; stop() comes before it (the test's 5 s limit is far below the minute).
    await keeper.stop();
    expect(asks.sort()).toEqual([41, 42]);
    expect(warnings).toHaveLength(2);
    expect(warnings.join('\n')).toMatch(/log proof not kept .*audit prove --index 41/);
    expect(warnings.join('\n')).toMatch(/audit prove --index 42/);
    expect(readdirSync(dir)).toEqual([]);
  });
});
