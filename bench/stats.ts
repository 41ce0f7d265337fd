export interface Summary {
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
  count: number;
}

export function summarise(latenciesMs: number[], seconds: number): Summary {
  const sorted = [...latenciesMs].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
  return { perSecond: sorted.length / seconds, p50Ms: at(0.5), p99Ms: at(0.99), count: sorted.length };
}
