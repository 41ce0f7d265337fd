// The time-stamping authority's state (docs/tsa.md): one identity per scope ('' the service's own TSA, otherwise a
// tenant id), with its key's reference in a key store, its certificate chain, and the serial counter. Plain
// Kysely, so SQLite and PostgreSQL share it like the rest of KyselyStore.
//
// Serial numbers: each instance reserves a block of counter values with one UPDATE ... RETURNING (a row lock on
// PostgreSQL, the one writer on SQLite), then numbers its tokens from that block in memory. Two instances never
// get the same block, so their counters never meet; a block left unused when a process stops is a gap, which
// RFC 3161 allows. The token's serial is (counter << 64) | 64 random bits (src/tsa/tsa-service.ts), so it stays
// unique even after a database is restored from a backup and hands out counters again.
import type { Kysely } from 'kysely';
import type { KeySpec } from '../../crypto/algorithms.js';
import type { KeyStoreKind } from '../../keys/key-store.js';
import type { PartContext } from '../part-context.js';
import type { TsaSigningAlgorithm } from '../records/tsa-algorithms.js';

export interface TsaTables {
  tsa_identities: {
    scope: string;
    key_store: string;
    key_ref: string;
    key_spec: string;
    algorithm: string;
    public_key_pem: string;
    chain_pem: string | null;
    csr_pem: string | null;
    serial_block: number | string | bigint;
    created_at: string;
    created_by: string;
    updated_at: string;
  };
}

/** The scope of the service's own TSA (tenants' scopes are their ids, which are never empty). */
export const SERVICE_TSA_SCOPE = '';

export interface TsaIdentityRecord {
  scope: string;
  keyStore: KeyStoreKind;
  keyRef: string;
  keySpec: KeySpec;
  algorithm: TsaSigningAlgorithm;
  publicKeyPem: string;
  /** TSA certificate first, then the CAs above it; null while a CSR waits for its certificate. */
  chainPem: string | null;
  csrPem: string | null;
  createdAt: string;
  createdBy: string;
  updatedAt: string;
}

function toIdentity(row: TsaTables['tsa_identities']): TsaIdentityRecord {
  return {
    scope: row.scope,
    keyStore: row.key_store as KeyStoreKind,
    keyRef: row.key_ref,
    keySpec: row.key_spec as KeySpec,
    algorithm: row.algorithm as TsaSigningAlgorithm,
    publicKeyPem: row.public_key_pem,
    chainPem: row.chain_pem,
    csrPem: row.csr_pem,
    createdAt: row.created_at,
    createdBy: row.created_by,
    updatedAt: row.updated_at,
  };
}

export class TsaStore {
  private readonly db: Kysely<TsaTables>;

  constructor(ctx: PartContext<TsaTables>) {
    this.db = ctx.db;
  }

  async getIdentity(scope: string): Promise<TsaIdentityRecord | undefined> {
    const row = await this.db.selectFrom('tsa_identities').selectAll().where('scope', '=', scope).executeTakeFirst();
    return row ? toIdentity(row) : undefined;
  }

  async listIdentities(): Promise<TsaIdentityRecord[]> {
    const rows = await this.db.selectFrom('tsa_identities').selectAll().orderBy('scope').execute();
    return rows.map(toIdentity);
  }

  /** Adds an identity; false when the scope has one already (the caller says how to replace it). */
  async createIdentity(record: TsaIdentityRecord): Promise<boolean> {
    const inserted = await this.db
      .insertInto('tsa_identities')
      .values({
        scope: record.scope,
        key_store: record.keyStore,
        key_ref: record.keyRef,
        key_spec: record.keySpec,
        algorithm: record.algorithm,
        public_key_pem: record.publicKeyPem,
        chain_pem: record.chainPem,
        csr_pem: record.csrPem,
        serial_block: 0,
        created_at: record.createdAt,
        created_by: record.createdBy,
        updated_at: record.updatedAt,
      })
      .onConflict((oc) => oc.column('scope').doNothing())
      .executeTakeFirst();
    return Number(inserted.numInsertedOrUpdatedRows ?? 0) === 1;
  }

  /** Installs the issued chain (checked by the caller against the identity's key); false when there is no identity. */
  async setChain(scope: string, chainPem: string, at: string): Promise<boolean> {
    const updated = await this.db
      .updateTable('tsa_identities')
      .set({ chain_pem: chainPem, csr_pem: null, updated_at: at })
      .where('scope', '=', scope)
      .executeTakeFirst();
    return Number(updated.numUpdatedRows) === 1;
  }

  /**
   * Reserves the next block of serial counters for this process: block b covers counters b*size+1 .. (b+1)*size.
   * One statement, so concurrent instances get distinct blocks.
   */
  async reserveSerialBlock(scope: string): Promise<bigint | undefined> {
    const row = await this.db
      .updateTable('tsa_identities')
      .set((eb) => ({ serial_block: eb('serial_block', '+', 1) }))
      .where('scope', '=', scope)
      .returning('serial_block')
      .executeTakeFirst();
    return row ? BigInt(row.serial_block) : undefined;
  }
}
