// Just the part of autocannon's API the benchmark uses (the package ships no types).
declare module 'autocannon' {
  interface Options {
    url: string;
    method?: string;
    headers?: Record<string, string>;
    body?: string;
    connections?: number;
    duration?: number;
    amount?: number;
    /** Requests per second across all connections (a fixed rate, not as fast as possible). */
    overallRate?: number;
    /** Per-request settings; onResponse sees each answer's status, body and headers. */
    requests?: Array<{
      onResponse?: (status: number, body: string, context: unknown, headers: Record<string, string>) => void;
    }>;
  }
  interface Histogram {
    average: number;
    p50: number;
    p99: number;
    mean: number;
  }
  interface Result {
    requests: Histogram & { total: number };
    latency: Histogram;
    non2xx: number;
    errors: number;
    duration: number;
  }
  function autocannon(options: Options): Promise<Result>;
  export type { Result };
  export default autocannon;
}
