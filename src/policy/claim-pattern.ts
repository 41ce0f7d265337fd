// Claim patterns of workload trust rules and policy requirements (docs/ci.md, "Trust rules"). Deliberately small:
// an exact value, or an anchored pattern where `*` matches within one path segment (never `/` or `:`) and `**`
// matches across `/` (never `:`). No free regular expressions: Vault's globs, whose `*` crosses `/` and `:`, let
// `repo:org/*` admit every ref and environment; this syntax cannot say that by accident.

/** Longest pattern accepted (a workflow reference with its ref is well under this). */
export const MAX_PATTERN_LENGTH = 512;

type Token = { kind: 'literal'; char: string } | { kind: 'segment' } | { kind: 'path' };

function tokenize(pattern: string): Token[] {
  const tokens: Token[] = [];
  for (let i = 0; i < pattern.length; i++) {
    if (pattern[i] === '*') {
      if (pattern[i + 1] === '*') {
        tokens.push({ kind: 'path' });
        i++;
      } else {
        tokens.push({ kind: 'segment' });
      }
    } else {
      tokens.push({ kind: 'literal', char: pattern[i] as string });
    }
  }
  return tokens;
}

/**
 * Why a pattern cannot be saved, or undefined when it can. Refused: empty, too long, `***`, and a pattern of
 * wildcards and separators only (such as `**` or `*` then a slash then `**`): it pins nothing.
 */
export function patternProblem(pattern: string): string | undefined {
  if (pattern.length === 0) return 'is empty';
  if (pattern.length > MAX_PATTERN_LENGTH) return `is longer than ${MAX_PATTERN_LENGTH} characters`;
  if (pattern.includes('***')) return 'has "***" (use "*" within a segment or "**" across segments)';
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused here
  if (/[\u0000-\u001f\u007f]/.test(pattern)) return 'has a control character';
  if (/^[*/:]*$/.test(pattern)) return 'has only wildcards and separators, so it pins nothing';
  return undefined;
}

/**
 * Whether `value` matches `pattern` as a whole. Linear in value length times pattern length (a dynamic programme,
 * not a backtracking regular expression), so no pattern can make a check slow.
 */
export function matchesPattern(pattern: string, value: string): boolean {
  const tokens = tokenize(pattern);
  // reach[j]: the first j tokens can match the value's prefix read so far.
  let reach = new Array<boolean>(tokens.length + 1).fill(false);
  reach[0] = true;
  const closeOverWildcards = (row: boolean[]) => {
    for (let j = 0; j < tokens.length; j++) if (row[j] && tokens[j]?.kind !== 'literal') row[j + 1] = true;
  };
  closeOverWildcards(reach);
  for (const ch of value) {
    const next = new Array<boolean>(tokens.length + 1).fill(false);
    for (let j = 0; j < tokens.length; j++) {
      if (!reach[j]) continue;
      const token = tokens[j] as Token;
      if (token.kind === 'literal') {
        if (token.char === ch) next[j + 1] = true;
      } else if (ch !== ':' && (token.kind === 'path' || ch !== '/')) {
        // A wildcard consumes this character and may go on consuming.
        next[j] = true;
      }
    }
    closeOverWildcards(next);
    reach = next;
    if (!reach.some(Boolean)) return false;
  }
  return reach[tokens.length] === true;
}

/** A claim's value as the patterns see it: strings as they are, numbers and booleans as text, nothing else. */
export function claimText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  if (typeof value === 'boolean') return String(value);
  return undefined;
}

/**
 * A claim by name: a top-level claim, or a JSON pointer (`/kubernetes.io/serviceaccount/name`) for the nested
 * claims Kubernetes puts in its tokens.
 */
export function readClaim(claims: Record<string, unknown>, name: string): unknown {
  if (!name.startsWith('/')) return Object.hasOwn(claims, name) ? claims[name] : undefined;
  let at: unknown = claims;
  for (const raw of name.slice(1).split('/')) {
    const part = raw.replaceAll('~1', '/').replaceAll('~0', '~');
    if (typeof at !== 'object' || at === null || Array.isArray(at) || !Object.hasOwn(at, part)) return undefined;
    at = (at as Record<string, unknown>)[part];
  }
  return at;
}

/**
 * Whether the claim satisfies the pattern: its text matches, or, for a list claim (`aud` may be one), one of its
 * entries does. A missing claim never matches.
 */
export function claimMatches(claims: Record<string, unknown>, name: string, pattern: string): boolean {
  const value = readClaim(claims, name);
  const values = Array.isArray(value) ? value : [value];
  return values.some((v) => {
    const text = claimText(v);
    return text !== undefined && matchesPattern(pattern, text);
  });
}
