// A request on a connection of its own (closed after the answer), and which process of the service answered it:
// with request workers the primary hands each new connection to the next worker, so consecutive fresh connections
// reach different workers, and the service's log line for the request (its x-request-id) names the process.
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import type { ServerProcess } from './cli.js';
import { until } from './wait.js';

export interface FreshAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Record<string, unknown>;
}

/** POST {base}/v1/<action> on a new connection (with `headers` besides the key's). */
export function postOnFreshConnection(
  base: string,
  action: string,
  token: string,
  body: object,
  headers: Record<string, string> = {},
): Promise<FreshAnswer> {
  const payload = JSON.stringify({ action, ...body });
  return new Promise((resolve, reject) => {
    const req = request(
      `${base}/v1/${action}`,
      {
        method: 'POST',
        agent: false,
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(payload),
          connection: 'close',
          ...headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: JSON.parse(Buffer.concat(chunks).toString() || '{}') as Record<string, unknown>,
          }),
        );
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/** The pid of the process whose log names the request `requestId` (the service logs at info level). */
export function answeredBy(server: ServerProcess, requestId: string): Promise<number> {
  return until(`the service's log line for request ${requestId}`, () => {
    const line = server
      .output()
      .split('\n')
      .find((l) => l.includes(`"reqId":"${requestId}"`));
    const pid = line && /"pid":(\d+)/.exec(line)?.[1];
    return pid ? Number(pid) : undefined;
  });
}

/** The pids of the request workers that said they were ready, in order (a restarted one comes later). */
export function readyWorkerPids(server: ServerProcess): number[] {
  return server
    .output()
    .split('\n')
    .filter((l) => l.includes('"msg":"request worker ready"'))
    .map((l) => Number(/"pid":(\d+)/.exec(l)?.[1]));
}

/** Whether a process with this pid is still running (a zombie counts as ended). */
export function isRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.split(') ').at(-1)?.[0] !== 'Z';
  } catch {
    return false;
  }
}
