// The one table of request counter names (src/store/records/counter-names.ts): no two counters can write into one
// row, and no code under src/ (.ts, .js, .cjs, .mjs) counts or reads a counter under a key it spelled itself.

import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { COUNTER_KEY_SEPARATOR, COUNTERS, counterKey } from '../../src/store/records/counter-names.js';

const root = join(import.meta.dirname, '..', '..');

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) out.push(...sourceFiles(path));
    else if (/\.(ts|js|cjs|mjs)$/.test(entry.name) && !entry.name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

interface CounterCall {
  at: string;
  firstArgument: ts.Expression | undefined;
}

/** Every `<...>.requestCounts.count(...)` and `.read(...)` call in `file`, with where it is. */
function counterCalls(file: string): CounterCall[] {
  const text = readFileSync(join(root, file), 'utf8');
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const calls: CounterCall[] = [];
  const visit = (node: ts.Node): void => {
    if (
      ts.isCallExpression(node) &&
      ts.isPropertyAccessExpression(node.expression) &&
      ['count', 'read'].includes(node.expression.name.text) &&
      ts.isPropertyAccessExpression(node.expression.expression) &&
      node.expression.expression.name.text === 'requestCounts'
    ) {
      const { line } = source.getLineAndCharacterOfPosition(node.getStart());
      calls.push({ at: `${file}:${line + 1}`, firstArgument: node.arguments[0] });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return calls;
}

const isCounterKeyCall = (node: ts.Expression | undefined): boolean =>
  node !== undefined &&
  ts.isCallExpression(node) &&
  ts.isIdentifier(node.expression) &&
  node.expression.text === 'counterKey' &&
  node.arguments[0] !== undefined &&
  (ts.isStringLiteral(node.arguments[0]) || ts.isIdentifier(node.arguments[0]));

describe('request counter names', () => {
  const names = Object.values(COUNTERS).map((counter) => counter.name);

  it('names every counter once, each with what it protects', () => {
    expect(new Set(names).size).toBe(names.length);
    for (const counter of Object.values(COUNTERS)) {
      expect(counter.name).toMatch(/^[a-z][a-z-]*( [a-z][a-z-]*)*$/);
      expect(counter.protects.length).toBeGreaterThan(20);
    }
  });

  it('gives no two counters a key in common: no name is another name and a separator', () => {
    for (const a of names) {
      for (const b of names) {
        if (a !== b) expect(`${b}${COUNTER_KEY_SEPARATOR}`.startsWith(`${a}${COUNTER_KEY_SEPARATOR}`)).toBe(false);
      }
    }
  });

  it('builds keys as the name and each part of the subject, one separator between', () => {
    expect(counterKey('trial', '192.0.2.7')).toBe('trial 192.0.2.7');
    expect(counterKey('tsaAnonymousDailyTotal')).toBe('tsa-day-total');
    // Unchanged by the table, so that no window restarts on an upgrade (docs/architecture.md, "Request counters").
    expect(counterKey('tokenExchange', '2001:db8::1')).toBe('token-exchange 2001:db8::1');
    expect(counterKey('velocityIdentity', 'acme', 'https://issuer repo:acme/app')).toBe(
      'velocity identity acme https://issuer repo:acme/app',
    );
    expect(counterKey('velocityTenant', 'acme')).toBe('velocity tenant acme');
  });

  it('is the only way any code under src/ names a counter it counts or reads', () => {
    const calls = sourceFiles('src').flatMap(counterCalls);
    // The check itself finds the call sites (the trial's, the TSA's, the device flow's, the exchange's, KMS's, velocity).
    expect(calls.length).toBeGreaterThanOrEqual(8);
    expect(calls.filter((call) => !isCounterKeyCall(call.firstArgument)).map((call) => call.at)).toEqual([]);
  });

  it('tells a key built through the table from one spelled at the call site', () => {
    const firstArgument = (code: string) => {
      const statement = ts.createSourceFile('probe.ts', code, ts.ScriptTarget.Latest, true).statements[0];
      return ((statement as ts.ExpressionStatement).expression as ts.CallExpression).arguments[0];
    };
    expect(isCounterKeyCall(firstArgument("store.requestCounts.count('trial ' + ip, now, 1000);"))).toBe(false);
    expect(isCounterKeyCall(firstArgument('store.requestCounts.count(request.ip, now, 1000);'))).toBe(false);
    expect(isCounterKeyCall(firstArgument("store.requestCounts.read(counterKey('trial', ip), 1, 2);"))).toBe(true);
  });
});
