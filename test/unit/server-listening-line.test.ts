// How the tests and benches find the address of a `signbridge server` they start (test/helpers/cli.ts): the line
// comes on stderr in chunks, and a chunk can end inside the URL.
import { describe, expect, it } from 'vitest';
import { listeningUrlIn } from '../helpers/cli.js';

describe('listeningUrlIn', () => {
  const line = 'signbridge server listening on http://127.0.0.1:41234 (2 request workers)\n';

  it('gives the URL of a whole line, with or without the workers after it', () => {
    expect(listeningUrlIn(`{"level":30}\n${line}`)).toBe('http://127.0.0.1:41234');
    expect(listeningUrlIn('signbridge server listening on http://127.0.0.1:8080\n')).toBe('http://127.0.0.1:8080');
  });

  it('gives nothing while the chunk stops inside the URL, and the whole URL once the line is complete', () => {
    const cut = line.indexOf(':412') + 3; // "...http://127.0.0.1:41"
    expect(listeningUrlIn(line.slice(0, cut))).toBeUndefined();
    expect(listeningUrlIn(line.slice(0, cut) + line.slice(cut))).toBe('http://127.0.0.1:41234');
  });

  it('gives nothing for output without the line', () => {
    expect(listeningUrlIn('signbridge: --listen must be host:port\n')).toBeUndefined();
  });
});
