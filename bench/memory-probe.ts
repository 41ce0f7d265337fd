// Where a process's memory goes, for the memory soak (bench/memory-soak.ts): loaded with `--import` into every
// process of the service (the primary and, through cluster's inherited execArgv, each request worker), it appends
// one JSON line every SIGNBRIDGE_MEMORY_PROBE_MS (default 10 s) to SIGNBRIDGE_MEMORY_PROBE_FILE: the resident set
// beside V8's own figures (process.memoryUsage, the heap's spaces), so that RSS can be split into the main isolate's
// heap, memory V8 knows of outside it (external, array buffers) and the rest (native: signing threads' isolates,
// SQLite, SoftHSM, malloc's arenas). Nothing in the service imports it; without the file variable it does nothing.
import cluster from 'node:cluster';
import { appendFileSync } from 'node:fs';
import { getHeapSpaceStatistics, getHeapStatistics } from 'node:v8';
import { isMainThread } from 'node:worker_threads';

/** One sample of one process, in bytes. */
export interface MemorySample {
  pid: number;
  role: string;
  at: number;
  rss: number;
  heapTotal: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
  newSpace: number;
  oldSpace: number;
  /** V8's own malloc'ed memory (compiler zones and such), outside the heap's spaces. */
  malloced: number;
}

const file = process.env.SIGNBRIDGE_MEMORY_PROBE_FILE;
const everyMs = Number(process.env.SIGNBRIDGE_MEMORY_PROBE_MS ?? 10_000);
// Signing threads inherit --import too: their isolates show in the process's RSS, not as samples of their own.
if (file && isMainThread) {
  const role = cluster.isPrimary ? 'primary' : `worker ${cluster.worker?.id ?? '?'}`;
  const space = (name: string) => getHeapSpaceStatistics().find((s) => s.space_name === name)?.space_size ?? 0;
  setInterval(() => {
    const m = process.memoryUsage();
    const sample: MemorySample = {
      pid: process.pid,
      role,
      at: Date.now(),
      rss: m.rss,
      heapTotal: m.heapTotal,
      heapUsed: m.heapUsed,
      external: m.external,
      arrayBuffers: m.arrayBuffers,
      newSpace: space('new_space'),
      oldSpace: space('old_space'),
      malloced: getHeapStatistics().malloced_memory,
    };
    appendFileSync(file, `${JSON.stringify(sample)}\n`);
  }, everyMs).unref();
}
