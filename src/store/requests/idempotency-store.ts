// Idempotency keys of signing requests (migration 0012): a retry with the same key gets the first answer again.
// Since migration 0033 a request that signs at once writes its record in the group commit of its `signed` entry
// (group-commit.ts: IdempotencyRecordRow); this part reads records, and writes those of the other answers.
import type { IdempotencyRecordRow } from '../commit/group-commit.js';
import { StorePart } from '../store-context.js';

export interface IdempotencyLookup {
  callerId: string;
  key: string;
  /** SHA-256 of the request it answers: the same key with another request is refused. */
  fingerprint: string;
  /** A claim in progress (an older release's) last touched before this was left by a process that died. */
  staleBefore: string;
  /** Records created before this have expired: the key may be used afresh. */
  expiredBefore: string;
}

/** A kept answer: the reply as stored, and the seq of the entry whose commit wrote it (null: the reply has its index). */
export interface KeptReply {
  reply: string;
  logSeq: number | null;
}

export type IdempotencyState =
  | { state: 'absent' }
  | ({ state: 'done' } & KeptReply)
  | { state: 'in_progress' }
  | { state: 'mismatch' };

export class IdempotencyStore extends StorePart {
  /**
   * What the store holds for a caller's key, read only: `absent` (or expired, or a dead claim): go ahead. `done`:
   * the first answer, to send again. `in_progress`: a claim of an older release still being answered (not older
   * than `staleBefore`). `mismatch`: the key was used with another request.
   */
  async look(l: IdempotencyLookup): Promise<IdempotencyState> {
    const row = await this.db
      .selectFrom('sign_idempotency')
      .select(['fingerprint', 'reply', 'created_at', 'updated_at', 'log_seq'])
      .where('caller_id', '=', l.callerId)
      .where('idem_key', '=', l.key)
      .executeTakeFirst();
    if (!row || row.created_at < l.expiredBefore) return { state: 'absent' };
    if (row.fingerprint !== l.fingerprint) return { state: 'mismatch' };
    if (row.reply !== null) return { state: 'done', reply: row.reply, logSeq: row.log_seq };
    return row.updated_at >= l.staleBefore ? { state: 'in_progress' } : { state: 'absent' };
  }

  /**
   * Writes the record of an answer that no `signed` entry's commit wrote (a 202, a signature collected rather than
   * made): in a statement of its own, with the same rule as the group commit's (a live record of the key is kept).
   */
  async remember(row: IdempotencyRecordRow): Promise<void> {
    const { expired_before, stale_before, ...record } = row;
    await this.db
      .insertInto('sign_idempotency')
      .values({ ...record, updated_at: record.created_at, log_seq: null })
      .onConflict((oc) =>
        oc
          .columns(['caller_id', 'idem_key'])
          .doUpdateSet((eb) => ({
            fingerprint: eb.ref('excluded.fingerprint'),
            reply: eb.ref('excluded.reply'),
            created_at: eb.ref('excluded.created_at'),
            updated_at: eb.ref('excluded.updated_at'),
            log_seq: null,
          }))
          .where((eb) =>
            eb.or([
              eb('sign_idempotency.created_at', '<', expired_before),
              eb.and([eb('sign_idempotency.reply', 'is', null), eb('sign_idempotency.updated_at', '<', stale_before)]),
            ]),
          ),
      )
      .execute();
  }
}
