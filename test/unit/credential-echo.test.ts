// The one helper that quotes a client's own text back to it (src/auth/credential-echo.ts), and the two-form refusal
// built on it: shown to the caller quoted, recorded in the logs without the text.
import { describe, expect, it } from 'vitest';
import { echoed, quoted } from '../../src/auth/credential-echo.js';

describe('quoting a client’s text back', () => {
  it('keeps printable ASCII and bounds the length (100 by default)', () => {
    expect(quoted('AKIA/2026/eu-west-1')).toBe('AKIA/2026/eu-west-1');
    expect(quoted('x'.repeat(150))).toBe('x'.repeat(100));
    expect(quoted('abcdef', 4)).toBe('abcd');
  });

  it('turns every other character into ?: control characters, escapes, non-ASCII', () => {
    expect(quoted('a\nb\u001b[31mc\u00e9\u{1F511}')).toBe('a?b?[31mc???');
  });

  it('is what a refusal shows, while the recorded form leaves the text out', () => {
    const message = echoed((quote) => `Value '${quote('sec\tret')}' is wrong`);
    expect(message.shown).toBe("Value 'sec?ret' is wrong");
    expect(message.recorded).toBe("Value '(7 characters, not recorded)' is wrong");
  });
});
