// Every counter kept in the store's request counters (request-count-store.ts, table trial_counters), by the feature
// it protects. A counter's key is its name, then each part of what it counts, one space between: `trial 192.0.2.7`,
// `velocity tenant acme`. Building every key here keeps two features from counting into one row by accident and lets
// two doors share a limit on purpose (the token exchange's, counted by POST /oauth/token and STS alike).
// test/unit/counter-names.test.ts checks that names cannot collide and that every count/read in src/ goes
// through counterKey. The table and what changed in the key strings: docs/architecture.md, "Request counters".

export interface CounterName {
  /** The key's first word(s): unique, and no other counter's key starts with it and a space. */
  readonly name: string;
  /** What the counter protects, and against whom it counts. */
  readonly protects: string;
}

export const COUNTERS = {
  trial: {
    name: 'trial',
    protects: 'POST /trial/sign: requests per client address (trial.maxPerWindow per trial.windowSeconds)',
  },
  tsaQueries: {
    name: 'tsa',
    protects: 'POST /tsa: time-stamp queries per client address or IPv6 /64 (tsa.maxPerWindow per tsa.windowSeconds)',
  },
  tsaAnonymousDaily: {
    name: 'tsa-day',
    protects: 'anonymous time-stamping: queries a day per client address or IPv6 /64 (tsa.anonymous.perAddressPerDay)',
  },
  tsaAnonymousDailyTotal: {
    name: 'tsa-day-total',
    protects: 'anonymous time-stamping: queries a day from every address together (tsa.anonymous.perDay)',
  },
  deviceStart: {
    name: 'device-start',
    protects: 'POST /oauth/device/start: device sign-ins started per client address (30 a minute)',
  },
  wrongCode: {
    name: 'wrong-code',
    protects: 'the device flow\'s code entry: wrong codes per client address (10 per 10 minutes, then "blocked")',
  },
  tokenExchange: {
    name: 'token-exchange',
    protects:
      'the CI token exchange, one allowance per client address for both of its doors: POST /oauth/token and ' +
      "STS's AssumeRoleWithWebIdentity (workload.exchangeLimit)",
  },
  kmsRefusal: {
    name: 'kms-refusal',
    protects: 'the audit log against unauthenticated floods: KMS refusals audited per client address a minute',
  },
  velocityIdentity: {
    name: 'velocity identity',
    protects: "the policy's perIdentity velocity limit: signatures per tenant and caller identity",
  },
  velocityRun: {
    name: 'velocity run',
    protects: "the policy's perRun velocity limit: signatures per tenant and CI run (all its attempts)",
  },
  velocityTenant: {
    name: 'velocity tenant',
    protects: "the policy's perTenant velocity limit: signatures per tenant",
  },
} as const satisfies Record<string, CounterName>;

export type Counter = keyof typeof COUNTERS;

/** Between a counter's name and each part of what it counts. */
export const COUNTER_KEY_SEPARATOR = ' ';

/** The store key of `counter` for `subject` (a client address, a tenant and a caller, ...; none for a total). */
export function counterKey(counter: Counter, ...subject: string[]): string {
  return [COUNTERS[counter].name, ...subject].join(COUNTER_KEY_SEPARATOR);
}
