// Signature record ids: UUIDv7, so records append to the id index in time order.
import { describe, expect, it } from 'vitest';
import { timeOrderedId } from '../../src/signing/time-ordered-id.js';

const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('timeOrderedId', () => {
  it('is a UUIDv7 whose first 48 bits are the time in ms', () => {
    const ms = Date.UTC(2026, 10, 23, 5, 10, 0, 123);
    const id = timeOrderedId(ms);
    expect(id).toMatch(V7);
    expect(Number.parseInt(id.replace(/-/g, '').slice(0, 12), 16)).toBe(ms);
  });

  it('sorts by time across milliseconds and never repeats', () => {
    const start = Date.UTC(2026, 0, 1);
    const ids = Array.from({ length: 3000 }, (_, i) => timeOrderedId(start + Math.floor(i / 10)));
    expect(new Set(ids).size).toBe(ids.length);
    const ms = (id: string) => Number.parseInt(id.slice(0, 8) + id.slice(9, 13), 16);
    const sorted = [...ids].sort();
    expect(sorted.map(ms)).toEqual(ids.map(ms));
    for (const id of ids) expect(id).toMatch(V7);
  });
});
