import type { KeyStoreOutage } from './key-store.js';

/**
 * Seals secrets under a key that never leaves the HSM (the PKCS#11 key store implements it with AES-256-GCM).
 * The software key store keeps its private keys only in this sealed form and opens one for each signature.
 */
export interface Sealer {
  seal(plaintext: Buffer, aad: Buffer): Promise<Buffer>;
  /** Throws when the blob or its aad was altered. */
  unseal(sealed: Buffer, aad: Buffer): Promise<Buffer>;
  /** The outage the sealer is in now (the token is away), if it can tell. */
  readonly outage?: KeyStoreOutage | undefined;
}

/** The first of the key stores that can seal (a PKCS#11 token); undefined when none can (AWS KMS alone). */
export function sealerAmong(stores: readonly object[]): Sealer | undefined {
  return stores.find((s): s is Sealer => typeof (s as Partial<Sealer>).seal === 'function') as Sealer | undefined;
}
