// Where a process's start-up goes (issue 44: restarts on PostgreSQL took 13-21 s). With SIGNBRIDGE_START_TIMING=1
// each step of the start prints one line to stderr: the process, the step, the milliseconds since this process
// began (Node's time origin, so module loading counts) and the wall clock (epoch ms, to line up the primary and its
// workers). bench/restart.ts sets it with RESTART_TIMING=1.
import cluster from 'node:cluster';
import { performance } from 'node:perf_hooks';

const on = process.env.SIGNBRIDGE_START_TIMING === '1';

/** Marks that the start reached `step`. */
export function startStep(step: string): void {
  if (!on) return;
  const who = cluster.isWorker ? `worker ${process.pid}` : `primary ${process.pid}`;
  process.stderr.write(`start timing: ${who} ${step} at ${Math.round(performance.now())} ms (clock ${Date.now()})\n`);
}
