// The audit vocabulary (src/store/records/audit-vocabulary.ts) is the one list of the actions and outcomes the
// service writes. tsc holds the TypeScript call sites to it (AuditEntryInput, append and the audit helpers); this
// test holds the rest: docs/policy.md's table says the same as the code's, and no source file, CommonJS ones and
// casts included, writes a literal action or outcome the table does not have.

import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import type { Audit } from '../../src/signing/service-audit.js';
import {
  AUDIT_ACTIONS,
  AUDIT_VOCABULARY,
  type AuditAction,
  isAuditAction,
} from '../../src/store/records/audit-vocabulary.js';
import type { Store } from '../../src/store/store.js';

const root = join(import.meta.dirname, '..', '..');
const DOC = 'docs/policy.md';
const HEADING = '### Actions and outcomes';

/** The table's rows as docs/policy.md writes them. */
function expectedRows(): string[] {
  return AUDIT_ACTIONS.map((action) => {
    const { outcomes, records } = AUDIT_VOCABULARY[action];
    return `| \`${action}\` | ${outcomes.map((o) => `\`${o}\``).join(', ')} | ${records} |`;
  });
}

/** The body rows of the first table under HEADING (the header and its rule left out). */
function documentedRows(text: string): string[] {
  const lines = text.split('\n');
  const start = lines.indexOf(HEADING);
  if (start < 0) return [];
  const table: string[] = [];
  for (const line of lines.slice(start + 1)) {
    if (line.startsWith('#')) break;
    if (line.startsWith('|')) table.push(line.trimEnd());
    else if (table.length > 0) break;
  }
  return table.slice(2);
}

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) out.push(...sourceFiles(path));
    else if (/\.(ts|cjs|mjs)$/.test(entry.name) && !entry.name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

/** The literal words an expression can be: 'a', c ? 'a' : 'b', x ?? 'a', ('a' as const). Nothing when dynamic. */
function wordsOf(node: ts.Expression | undefined): string[] {
  if (!node) return [];
  if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) return [node.text];
  if (ts.isConditionalExpression(node)) return [...wordsOf(node.whenTrue), ...wordsOf(node.whenFalse)];
  if (ts.isParenthesizedExpression(node) || ts.isAsExpression(node) || ts.isSatisfiesExpression(node)) {
    return wordsOf(node.expression);
  }
  if (ts.isBinaryExpression(node)) {
    const op = node.operatorToken.kind;
    if (op === ts.SyntaxKind.QuestionQuestionToken || op === ts.SyntaxKind.BarBarToken) {
      return [...wordsOf(node.left), ...wordsOf(node.right)];
    }
  }
  return [];
}

/** The audit helpers: signing's Audit (tenant, actor, action, outcome, details, events?) and the CLI's (tenant, action, outcome, details). */
const HELPERS = new Set(['audit', 'cliAudit']);

interface Written {
  where: string;
  actions: string[];
  outcomes: string[];
}

/**
 * Where a file writes an audit entry with literal words: an object literal with both `action` and `outcome` (an
 * entry handed to append), and a call of an audit helper, whose last arguments are action, outcome, details and,
 * in a sixth, the events.
 */
function writtenIn(file: string, text: string): Written[] {
  const kind = file.endsWith('.ts') ? ts.ScriptKind.TS : ts.ScriptKind.JS;
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, kind);
  const found: Written[] = [];
  const where = (node: ts.Node) => `${file}:${source.getLineAndCharacterOfPosition(node.getStart()).line + 1}`;
  const visit = (node: ts.Node): void => {
    if (ts.isObjectLiteralExpression(node)) {
      const value = (name: string) => {
        const property = node.properties.find(
          (p): p is ts.PropertyAssignment => ts.isPropertyAssignment(p) && p.name.getText(source) === name,
        );
        return property?.initializer;
      };
      const hasBoth = ['action', 'outcome'].every((name) =>
        node.properties.some((p) => p.name !== undefined && p.name.getText(source) === name),
      );
      if (hasBoth)
        found.push({ where: where(node), actions: wordsOf(value('action')), outcomes: wordsOf(value('outcome')) });
    }
    if (ts.isCallExpression(node)) {
      const callee = node.expression;
      const name = ts.isIdentifier(callee)
        ? callee.text
        : ts.isPropertyAccessExpression(callee)
          ? callee.name.text
          : '';
      if (HELPERS.has(name) && node.arguments.length >= 4) {
        const last = node.arguments.length === 6 ? 5 : node.arguments.length;
        found.push({
          where: where(node),
          actions: wordsOf(node.arguments[last - 3]),
          outcomes: wordsOf(node.arguments[last - 2]),
        });
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** What is wrong with a written entry's words: an action not in the table, an outcome none of its actions has. */
function problemsOf(written: Written[]): string[] {
  const problems: string[] = [];
  for (const { where, actions, outcomes } of written) {
    for (const action of actions) {
      if (!isAuditAction(action)) problems.push(`${where}: action '${action}' is not in the audit vocabulary`);
    }
    const known = actions.filter(isAuditAction);
    const allowed = (known.length > 0 ? known : AUDIT_ACTIONS).flatMap(
      (action): readonly string[] => AUDIT_VOCABULARY[action].outcomes,
    );
    for (const outcome of outcomes) {
      if (!allowed.includes(outcome)) {
        problems.push(
          `${where}: outcome '${outcome}' is not one of ${known.length > 0 ? known.join(', ') : 'any action'}'s`,
        );
      }
    }
  }
  return problems;
}

const files = [...sourceFiles('src'), ...sourceFiles('daemon')].sort();
const written = files.flatMap((file) => writtenIn(file, readFileSync(join(root, file), 'utf8')));

describe('audit vocabulary', () => {
  it('gives every action at least one outcome and a line saying what it records', () => {
    for (const action of AUDIT_ACTIONS) {
      const { outcomes, records } = AUDIT_VOCABULARY[action];
      expect(outcomes.length, action).toBeGreaterThan(0);
      expect(new Set(outcomes).size, action).toBe(outcomes.length);
      expect(records.trim(), action).not.toBe('');
      expect(records, action).not.toContain('|');
    }
  });

  it(`is the table in ${DOC} ("${HEADING.slice(4)}"), row for row`, () => {
    const rows = documentedRows(readFileSync(join(root, DOC), 'utf8'));
    const expected = expectedRows();
    // On a difference, the message is the table to paste under the heading.
    expect(rows, ['| action | outcomes | records |', '|---|---|---|', ...expected].join('\n')).toEqual(expected);
  });

  it('is where the docs that name audit actions link to', () => {
    const anchor = 'policy.md#actions-and-outcomes';
    const linking = readdirSync(join(root, 'docs'))
      .filter((name) => name.endsWith('.md'))
      .filter((name) => readFileSync(join(root, 'docs', name), 'utf8').includes(`](${anchor})`));
    expect(linking.length).toBeGreaterThanOrEqual(3);
    expect(readFileSync(join(root, DOC), 'utf8').split('\n')).toContain(HEADING);
  });

  it('has every action and outcome a source file writes under src/ and daemon/', () => {
    expect(problemsOf(written)).toEqual([]);
  });

  it('finds the written entries of each shape (an entry given to append, the signing and the CLI helpers)', () => {
    const actions = new Set(written.flatMap((w) => w.actions));
    // One of each: an entry written out (the TSA's), signing's Audit, its outcome-by-condition, the CLI's helpers.
    for (const action of ['timestamp', 'key_store_outage', 'tsa_clock_step', 'vulndb_import', 'person_disable']) {
      expect(actions.has(action), action).toBe(true);
    }
    expect(written.length).toBeGreaterThanOrEqual(40);
  });

  it('reports a misspelt action and an outcome its action does not have, in TypeScript and CommonJS', () => {
    const typescript = `
      store.audit.append({ at, tenantId, actor, action: 'rotate_keys', outcome: 'rotated', details });
      await this.audit(tenantId, actor, 'approve_sign', 'approved', about, [event]);
      cliAudit(null, 'vulndb_import', flag ? 'imported' : 'created', {});`;
    const cjs = `module.exports = (at) => ({ at, action: 'sign', outcome: 'ok', details: {} });`;
    expect(problemsOf([...writtenIn('a.ts', typescript), ...writtenIn('b.cjs', cjs)])).toEqual([
      "a.ts:2: action 'rotate_keys' is not in the audit vocabulary",
      "a.ts:3: outcome 'approved' is not one of approve_sign's",
      "a.ts:4: outcome 'created' is not one of vulndb_import's",
      "b.cjs:1: outcome 'ok' is not one of sign's",
    ]);
  });

  it('makes tsc refuse an entry with an action not in the table or an outcome its action lacks', () => {
    // Never called: tsc checks these lines (test/ is in tsconfig.json), and an unused @ts-expect-error fails it.
    const misspelt = (store: Store, audit: Audit, at: string) => {
      const about = { at, tenantId: null, actor: 'service', details: {} };
      return [
        // @ts-expect-error 'rotate_keys' is not an action
        store.audit.append({ ...about, action: 'rotate_keys', outcome: 'rotated' }),
        // @ts-expect-error create_tenant is never revoked
        store.audit.append({ ...about, action: 'create_tenant', outcome: 'revoked' }),
        // @ts-expect-error approve_sign has no `approved` outcome
        audit(null, 'service', 'approve_sign', 'approved', {}),
        audit(null, 'service', 'approve_sign', 'stage_approved', {}),
        store.audit.append({ ...about, action: 'create_tenant', outcome: 'created' }),
      ];
    };
    const action: AuditAction = 'sign';
    expect(typeof misspelt).toBe('function');
    expect(isAuditAction(action)).toBe(true);
    expect(isAuditAction('signed')).toBe(false);
  });
});
