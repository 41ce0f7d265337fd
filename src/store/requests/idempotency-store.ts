// Idempotency keys of signing requests (migration 0012): a retry with the same key gets the first answer again.
import { StorePart } from '../store-context.js';

export interface IdempotencyClaim {
  callerId: string;
  key: string;
  /** SHA-256 of the request it answers: the same key with another request is refused. */
  fingerprint: string;
  at: string;
  /** An in-progress claim last touched before this was left by a process that died: it may be taken over. */
  staleBefore: string;
  /** Claims created before this have expired: the key may be used afresh. */
  expiredBefore: string;
}

export type IdempotencyState =
  | { state: 'claimed' }
  | { state: 'done'; reply: string }
  | { state: 'in_progress' }
  | { state: 'mismatch' };

export class IdempotencyStore extends StorePart {
  /**
   * Claims an idempotency key for a caller (migration 0012). `claimed`: go ahead, then complete or release it.
   * `done`: the first answer, to send again. `in_progress`: someone else is working on it (not older than
   * `staleBefore`). `mismatch`: the key was used with another request. A claim older than `expiredBefore` counts
   * as absent.
   */
  async claim(c: IdempotencyClaim): Promise<IdempotencyState> {
    const fresh = {
      caller_id: c.callerId,
      idem_key: c.key,
      fingerprint: c.fingerprint,
      reply: null,
      created_at: c.at,
      updated_at: c.at,
    };
    for (let attempt = 0; attempt < 3; attempt++) {
      const inserted = await this.db
        .insertInto('sign_idempotency')
        .values(fresh)
        .onConflict((oc) => oc.columns(['caller_id', 'idem_key']).doNothing())
        .executeTakeFirst();
      if (Number(inserted.numInsertedOrUpdatedRows ?? 0n) === 1) return { state: 'claimed' };
      const row = await this.db
        .selectFrom('sign_idempotency')
        .selectAll()
        .where('caller_id', '=', c.callerId)
        .where('idem_key', '=', c.key)
        .executeTakeFirst();
      if (!row) continue; // released or expired meanwhile: try to insert again
      const expired = row.created_at < c.expiredBefore;
      if (!expired && row.fingerprint !== c.fingerprint) return { state: 'mismatch' };
      if (!expired && row.reply !== null) return { state: 'done', reply: row.reply };
      if (!expired && row.updated_at >= c.staleBefore) return { state: 'in_progress' };
      // Expired, or left in progress by a process that died: take it over, unless another caller just did.
      const taken = await this.db
        .updateTable('sign_idempotency')
        .set(fresh)
        .where('caller_id', '=', c.callerId)
        .where('idem_key', '=', c.key)
        .where('updated_at', '=', row.updated_at)
        .executeTakeFirst();
      if (Number(taken.numUpdatedRows) === 1) return { state: 'claimed' };
    }
    return { state: 'in_progress' };
  }

  async complete(callerId: string, key: string, reply: string, at: string): Promise<void> {
    await this.db
      .updateTable('sign_idempotency')
      .set({ reply, updated_at: at })
      .where('caller_id', '=', callerId)
      .where('idem_key', '=', key)
      .execute();
  }

  async release(callerId: string, key: string): Promise<void> {
    await this.db
      .deleteFrom('sign_idempotency')
      .where('caller_id', '=', callerId)
      .where('idem_key', '=', key)
      .where('reply', 'is', null)
      .execute();
  }
}
