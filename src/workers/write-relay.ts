// The primary's side of its request workers' writes (ipc-commit-sink.ts): each write goes into the primary store's
// group commit, so the audit chain has one appender and the writes of all workers that arrive in one turn commit in
// one transaction. The answers to one worker of one commit travel as one message.
import type { Worker } from 'node:cluster';
import type { Write } from '../store/commit/group-commit.js';
import { ours, type WrittenMessage } from './messages.js';

/** Commits the writes `worker` sends with `commit` and answers each once it is durable (or failed). */
export function relayWrites(worker: Worker, commit: (write: Write) => Promise<number | undefined>): void {
  let answers: WrittenMessage | undefined;
  const answer = (): WrittenMessage => {
    if (!answers) {
      answers = { signbridge: 'written', done: [], failed: [] };
      // After the commit's callbacks ran (they settle in one go): one message for the batch.
      process.nextTick(send);
    }
    return answers;
  };
  const send = () => {
    const message = answers;
    answers = undefined;
    // A worker that died meanwhile answered nobody: its writes stand (written ahead, as after any crash).
    if (message && worker.isConnected()) worker.send(message, () => undefined);
  };
  worker.on('message', (message: unknown) => {
    const writes = ours(message, 'writes');
    if (!writes) return;
    for (const [id, write] of writes.writes) {
      commit(write).then(
        (seq) => answer().done.push([id, seq ?? null]),
        (err: unknown) => {
          const code = (err as { code?: unknown })?.code;
          answer().failed.push([
            id,
            (err as Error)?.message ?? String(err),
            typeof code === 'string' ? code : undefined,
          ]);
        },
      );
    }
  });
}
