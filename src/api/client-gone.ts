// The end of a held wait when the client goes away (held-wait.ts's `signal`): the KMS and Vault doors, whose clients
// know no 202, wait for a person's decision within the call, and waiting on for a client that left would serve
// nobody.
import type { ServerResponse } from 'node:http';

/** What the signal reads of the response: whether it closed, and whether its answer was written first. */
export type ClosingResponse = Pick<ServerResponse, 'destroyed' | 'writableEnded' | 'once'>;

/**
 * Aborted when the client goes away before its answer was written: the response closes unwritten (the request's own
 * 'close' fires as soon as its body was read, so it says nothing). A response already closed so is aborted at once.
 */
export function clientGoneSignal(response: ClosingResponse): AbortSignal {
  const controller = new AbortController();
  if (response.destroyed && !response.writableEnded) controller.abort();
  else response.once('close', () => !response.writableEnded && controller.abort());
  return controller.signal;
}
