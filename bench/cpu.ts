// CPU time per signature, by process, over one measurement: what the arithmetic behind an aim needs on a machine
// where the service, PostgreSQL and the load generator share the same cores. Linux /proc only (the bench machine).
import { readdirSync, readFileSync } from 'node:fs';

/** utime + stime of one process, in ms (clock ticks of 10 ms: USER_HZ is 100 on Linux). */
function processCpuMs(pid: number): number {
  try {
    // Fields after the command name, which may hold spaces and parentheses: utime and stime are the 12th and 13th.
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ').at(-1)?.split(' ') ?? [];
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return 0; // ended meanwhile
  }
}

/**
 * CPU of every process named `postgres` (the postmaster, its backends, the WAL writer, the checkpointer), by pid:
 * a backend may end during a measurement (the pool closes idle connections), so deltas are taken per process.
 */
function postgresCpuMs(): Map<number, number> {
  const byPid = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === 'postgres') {
        byPid.set(Number(entry), processCpuMs(Number(entry)));
      }
    } catch {
      // ended meanwhile
    }
  }
  return byPid;
}

/** CPU used since `before` by the processes alive now (one that ended meanwhile is not counted: a lower bound). */
function postgresCpuSince(before: Map<number, number>): number {
  let total = 0;
  for (const [pid, ms] of postgresCpuMs()) total += ms - (before.get(pid) ?? 0);
  return total;
}

export interface CpuShare {
  /** CPU microseconds per request: the service instance(s), PostgreSQL, the load generator (this process). */
  serviceUs: number;
  postgresUs: number;
  loadUs: number;
  /** Cores kept busy on average by all three. */
  cores: number;
}

/** Starts counting; the returned function ends the count over `requests` requests and `seconds` of wall time. */
export function countCpu(servicePids: number[]): (requests: number, seconds: number) => CpuShare {
  const service0 = servicePids.map(processCpuMs);
  const postgres0 = postgresCpuMs();
  const load0 = process.cpuUsage();
  return (requests, seconds) => {
    const serviceMs = servicePids.reduce((sum, pid, i) => sum + processCpuMs(pid) - (service0[i] ?? 0), 0);
    const postgresMs = postgresCpuSince(postgres0);
    const load = process.cpuUsage(load0);
    const loadMs = (load.user + load.system) / 1000;
    const per = (ms: number) => Math.round((ms * 1000) / Math.max(requests, 1));
    return {
      serviceUs: per(serviceMs),
      postgresUs: per(postgresMs),
      loadUs: per(loadMs),
      cores: Number(((serviceMs + postgresMs + loadMs) / 1000 / seconds).toFixed(2)),
    };
  };
}

/**
 * CPU of the children this process has run to their end (`execFileSync`'s C client), in ms: cutime + cstime of
 * /proc/self/stat, which count a child once it has been waited for.
 */
function waitedChildrenCpuMs(): number {
  const fields = readFileSync('/proc/self/stat', 'utf8').split(') ').at(-1)?.split(' ') ?? [];
  return (Number(fields[13]) + Number(fields[14])) * 10;
}

/**
 * Starts counting the CPU of a path's processes (`pids`, by name: the daemon, the service) and of the client run to
 * its end meanwhile; the returned function gives each one's CPU microseconds per signature over `requests`
 * (`<name>Us`, `clientUs`). Their sum over the cores is the bound on signatures per second (docs/benchmarks.md,
 * "Less per request").
 */
export function countPathCpu(pids: Record<string, number>): (requests: number) => Record<string, number> {
  const names = Object.keys(pids);
  const before = names.map((name) => processCpuMs(pids[name] as number));
  const client0 = waitedChildrenCpuMs();
  return (requests) => {
    const per = (ms: number) => Math.round((ms * 1000) / Math.max(requests, 1));
    const out: Record<string, number> = {};
    names.forEach((name, i) => {
      out[`${name}Us`] = per(processCpuMs(pids[name] as number) - (before[i] ?? 0));
    });
    out.clientUs = per(waitedChildrenCpuMs() - client0);
    return out;
  };
}
