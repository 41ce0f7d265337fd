// What opening a PKCS#11 key store takes: src/open-stores.ts builds it from the key store settings, softhsm.ts
// for the embedded SoftHSM.

export interface Pkcs11KeyStoreOptions {
  modulePath: string;
  tokenLabel: string;
  pin: string;
  /** Sessions kept open; concurrent signatures beyond this wait for a free one. */
  sessions?: number;
  /** When the labelled token does not exist, initialise the first free slot with this SO PIN (SoftHSM). */
  initialiseWithSoPin?: string;
  /** A lock file held while looking for the token and creating it, so two processes starting at once make one. */
  initialiseLock?: string;
  /**
   * Threads that run C_SignInit + C_Sign (default: one per core). 0 signs from the main thread with C_Sign on
   * libuv's pool instead, for modules that do not tolerate calls from several threads.
   */
  signThreads?: number;
  /**
   * Sign on the event loop instead of a signing thread when no thread is busy and this key spec's signatures take
   * the token less than this many ms (measured, moving average). Default 2; 0 always uses the threads.
   */
  inlineBelowMs?: number;
}
