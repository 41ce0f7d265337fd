// The one form reader (src/net/form-fields.ts): what each door that reads forms relied on before it shared one
// (the console and sign-in pages: the last of a repeated field; POST /oauth/token and STS: a repeated field refused
// with their own error), and the decoding all of them get alike.
import { describe, expect, it } from 'vitest';
import { formFields, formObject } from '../../src/net/form-fields.js';

class RepeatedField extends Error {}
const refuseRepeated = (name: string) => new RepeatedField(`${name} is given more than once`);

describe('form fields', () => {
  it('decodes as browsers encode: + is a space, percent escapes in UTF-8, empty values, a name without =', () => {
    expect([...formFields('a=1+2&b=%C3%A9t%C3%A9&c=&d&e=x%3Dy%26z')]).toEqual([
      ['a', '1 2'],
      ['b', 'été'],
      ['c', ''],
      ['d', ''],
      ['e', 'x=y&z'],
    ]);
    expect(formFields('').size).toBe(0);
  });

  it('keeps a bad percent sequence as written and reads bytes that are not UTF-8 as U+FFFD', () => {
    expect(formFields('a=%zz&b=%E9').get('a')).toBe('%zz');
    expect(formFields('a=%zz&b=%E9').get('b')).toBe('\uFFFD');
    expect(formFields(Buffer.from([0x61, 0x3d, 0xff, 0x41])).get('a')).toBe('\uFFFDA');
  });

  it('lets the last of a repeated field count, unless the caller refuses repeats with its own error', () => {
    expect(formObject('a=1&b=2&a=3')).toEqual({ a: '3', b: '2' });
    expect(Object.keys(formObject('a=1&b=2&a=3'))).toEqual(['a', 'b']);
    expect(() => formFields('a=1&b=2&a=3', { refuseRepeated })).toThrow(new RepeatedField('a is given more than once'));
    // A field repeated with an empty value is repeated all the same.
    expect(() => formObject('a=1&a=', { refuseRepeated })).toThrow(RepeatedField);
    expect(formObject('a=1&b=2', { refuseRepeated })).toEqual({ a: '1', b: '2' });
  });

  it('reads a field named like an Object property as data, never as the object’s prototype', () => {
    const fields = formObject('__proto__=x&constructor=y');
    expect(Object.getPrototypeOf(fields)).toBe(Object.prototype);
    expect(Object.hasOwn(fields, '__proto__')).toBe(true);
    expect(fields.constructor).toBe('y');
    expect(() => formObject('__proto__=x&__proto__=y', { refuseRepeated })).toThrow(RepeatedField);
  });
});
