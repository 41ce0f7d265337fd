// Where a process's memory goes, for the memory soak (bench/memory-soak.ts): loaded with `--import` into every
// process of the service (the primary and, through cluster's inherited execArgv, each request worker), it appends
// one JSON line every SIGNBRIDGE_MEMORY_PROBE_MS (default 10 s) to SIGNBRIDGE_MEMORY_PROBE_FILE: the resident set
// beside V8's own figures (process.memoryUsage, the heap's spaces), so that RSS can be split into the main isolate's
// heap, memory V8 knows of outside it (external, array buffers) and the rest (native: signing threads' isolates,
// SQLite, SoftHSM, malloc's arenas). Nothing in the service imports it; without the file variable it does nothing.
import cluster from 'node:cluster';
import { appendFileSync, readFileSync } from 'node:fs';
import { getHeapSpaceStatistics, getHeapStatistics } from 'node:v8';
import { isMainThread, threadId } from 'node:worker_threads';

/** One sample of one process, in bytes. */
export interface MemorySample {
  pid: number;
  role: string;
  at: number;
  rss: number;
  /** The resident set less the pages of files (the node binary, libraries): RssAnon of /proc/self/status. */
  rssAnon: number;
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

/** RssAnon in bytes: what of the resident set is the process's own, not a file's pages shared with other processes. */
function anonymousRss(): number {
  const kb = /RssAnon:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1];
  return kb === undefined ? 0 : Number(kb) * 1024;
}
const everyMs = Number(process.env.SIGNBRIDGE_MEMORY_PROBE_MS ?? 10_000);
// Threads (signing, SQLite's writer and checkpointer) inherit --import too: each samples its own isolate's heap, as
// `thread <id>` (its rss is its process's, which the report finds by pid), so the report can take their heaps out of
// the native rest.
if (file) {
  const processRole = cluster.isPrimary ? 'primary' : `worker ${cluster.worker?.id ?? '?'}`;
  const role = isMainThread ? processRole : `thread ${threadId}`;
  const space = (name: string) => getHeapSpaceStatistics().find((s) => s.space_name === name)?.space_size ?? 0;
  setInterval(() => {
    const m = process.memoryUsage();
    const sample: MemorySample = {
      pid: process.pid,
      role,
      at: Date.now(),
      rss: m.rss,
      rssAnon: anonymousRss(),
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
