import { performance } from 'node:perf_hooks';

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

/**
 * Runs `op` back to back on this thread for `seconds` (after 20 unrecorded calls for the JIT): the rate, latencies,
 * and CPU time per call (process.cpuUsage), which unlike the latencies does not grow when others load the machine.
 */
export function timedLoop(seconds: number, op: () => void): Summary & { cpuMs: number } {
  for (let i = 0; i < 20; i++) op();
  const latencies: number[] = [];
  const cpu = process.cpuUsage();
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const t0 = performance.now();
    op();
    latencies.push(performance.now() - t0);
  }
  const used = process.cpuUsage(cpu);
  return { ...summarise(latencies, seconds), cpuMs: (used.user + used.system) / 1000 / latencies.length };
}
