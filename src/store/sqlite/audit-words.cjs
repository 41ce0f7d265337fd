// The dictionary of packed audit entries (audit_words, migration 0032; entry-packing.cjs) on a better-sqlite3
// connection: a word's id, added in the caller's transaction when new. Ids are never reused or deleted, so the
// ids a committed transaction used are kept in memory for good; those of a transaction that failed are forgotten
// (another process may give the same id to another word). Plain CommonJS: the writer thread uses it too.
'use strict';

function sqliteWords(db) {
  const idByText = new Map();
  const textById = new Map();
  /** Words this transaction added or read, kept once it commits. */
  const pending = new Map();
  const selectId = db.prepare('SELECT id FROM audit_words WHERE text = ?').pluck();
  const selectText = db.prepare('SELECT text FROM audit_words WHERE id = ?').pluck();
  const insert = db.prepare('INSERT INTO audit_words (text) VALUES (?)');
  return {
    idOf(text) {
      let id = idByText.get(text) ?? pending.get(text);
      if (id !== undefined) return id;
      id = selectId.get(text);
      if (id === undefined) id = Number(insert.run(text).lastInsertRowid);
      pending.set(text, id);
      return id;
    },
    textOf(id) {
      const known = textById.get(id);
      if (known !== undefined) return known;
      for (const [text, pendingId] of pending) if (pendingId === id) return text;
      const text = selectText.get(id);
      if (text === undefined) throw new Error(`audit_words has no word ${id}`);
      // Read, not added by this transaction: committed by another.
      textById.set(id, text);
      return text;
    },
    /** The transaction committed: its words are for good. */
    committed() {
      for (const [text, id] of pending) {
        idByText.set(text, id);
        textById.set(id, text);
      }
      pending.clear();
    },
    /** The transaction rolled back: its new ids may go to other words. */
    rolledBack() {
      pending.clear();
    },
  };
}

module.exports = { sqliteWords };
