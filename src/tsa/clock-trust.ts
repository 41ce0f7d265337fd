// Whether this host's clock may be stated in a time-stamp token (docs/tsa.md, "Clock trust"). A token tells the
// world what time it was; a TSA whose clock is off would put a false time under a signature that outlives it. One
// checker runs in the background and requests read its last verdict (never a probe per request):
//
// - `ntp`: the host's time synchronisation state. `timedatectl show` reports the kernel's NTP-synchronised flag
//   (systemd-timesyncd, chrony or ntpd set it through adjtimex); where systemd does not run, `chronyc tracking`
//   reports chrony's own state and offset. Neither readable: not trusted (the host cannot show it is in sync).
// - `database` (PostgreSQL): the database server's clock, read with clock_timestamp() and compared with the middle
//   of the round trip; trusted while |offset| + RTT/2 stays under maxOffsetMs. For fleets where the database host is
//   the one whose clock is disciplined and watched.
// - `none`: never checked. For tests and trials only; /readyz says so.
//
// Independently, genTime never goes back: a process that sees its clock step back further than the stated accuracy
// stops time-stamping until the checker has passed again after the step (TsaService reports steps).
import { execFile } from 'node:child_process';

export const CLOCK_CHECKS = ['ntp', 'database', 'none'] as const;
export type ClockCheck = (typeof CLOCK_CHECKS)[number];

export interface ClockTrustSettings {
  check: ClockCheck;
  /** Largest difference to the reference clock still trusted (ntp with chrony, database). */
  maxOffsetMs: number;
  intervalMs: number;
}

export type ClockVerdict =
  | { trusted: true; source: string; offsetMs?: number }
  | { trusted: false; source: string; reason: string };

/** Reads a reference time: the database server's clock (PostgresStore.databaseTime). */
export type ReferenceClock = () => Promise<Date>;

/** Runs a command and gives its stdout, or undefined when it is not installed, fails or takes over 2 s. */
export type RunCommand = (file: string, args: readonly string[]) => Promise<string | undefined>;

const runCommand: RunCommand = (file, args) =>
  new Promise((resolve) => {
    execFile(file, [...args], { timeout: 2000, env: { ...process.env, LC_ALL: 'C' } }, (err, stdout) =>
      resolve(err ? undefined : stdout),
    );
  });

/** chronyc -c tracking: CSV; field 5 is the system clock's offset in seconds, the last field the leap status. */
function chronyVerdict(csv: string, maxOffsetMs: number): ClockVerdict {
  const fields = csv.trim().split(',');
  const leap = fields.at(-1) ?? '';
  const offsetMs = Math.abs(Number(fields[4]) * 1000);
  if (leap !== 'Normal') return { trusted: false, source: 'chrony', reason: `chrony is not synchronised (${leap})` };
  if (!Number.isFinite(offsetMs) || offsetMs > maxOffsetMs) {
    return { trusted: false, source: 'chrony', reason: `chrony's offset ${offsetMs} ms is over ${maxOffsetMs} ms` };
  }
  return { trusted: true, source: 'chrony', offsetMs };
}

export async function checkNtp(maxOffsetMs: number, run: RunCommand = runCommand): Promise<ClockVerdict> {
  const synced = await run('timedatectl', ['show', '--property=NTPSynchronized', '--value']);
  if (synced?.trim() === 'yes') return { trusted: true, source: 'ntp (timedatectl)' };
  const chrony = await run('chronyc', ['-n', '-c', 'tracking']);
  if (chrony !== undefined && chrony.trim() !== '') return chronyVerdict(chrony, maxOffsetMs);
  if (synced?.trim() === 'no') {
    return { trusted: false, source: 'ntp (timedatectl)', reason: 'the host clock is not NTP-synchronised' };
  }
  return {
    trusted: false,
    source: 'ntp',
    reason:
      'the host shows no time synchronisation state (neither timedatectl nor chronyc answered); run an NTP client, or set tsa.clock.check',
  };
}

export async function checkDatabase(reference: ReferenceClock, maxOffsetMs: number): Promise<ClockVerdict> {
  const sent = Date.now();
  let serverTime: Date;
  try {
    serverTime = await reference();
  } catch (err) {
    return {
      trusted: false,
      source: 'database',
      reason: `the database clock cannot be read: ${(err as Error).message}`,
    };
  }
  const received = Date.now();
  const halfTrip = (received - sent) / 2;
  const offsetMs = serverTime.getTime() - (sent + halfTrip);
  if (Math.abs(offsetMs) + halfTrip > maxOffsetMs) {
    return {
      trusted: false,
      source: 'database',
      reason: `this host's clock is ${Math.round(offsetMs)} ms from the database server's (±${Math.round(halfTrip)} ms), over ${maxOffsetMs} ms`,
    };
  }
  return { trusted: true, source: 'database', offsetMs };
}

export class ClockTrust {
  private last: ClockVerdict = { trusted: false, source: 'none yet', reason: 'the clock has not been checked yet' };
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<ClockVerdict> | undefined;
  private onChange: ((verdict: ClockVerdict) => void) | undefined;

  constructor(
    private readonly settings: ClockTrustSettings,
    private readonly reference?: ReferenceClock,
    private readonly run: RunCommand = runCommand,
  ) {
    if (settings.check === 'none') this.last = { trusted: true, source: 'none (not checked)' };
  }

  get verdict(): ClockVerdict {
    return this.last;
  }

  get check(): ClockCheck {
    return this.settings.check;
  }

  /** Checks now, then every intervalMs; `onChange` hears each change of verdict (the service logs it). */
  async start(onChange?: (verdict: ClockVerdict) => void): Promise<void> {
    this.onChange = onChange;
    if (this.settings.check === 'none') return;
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), this.settings.intervalMs);
    this.timer.unref();
  }

  /** Runs one check (a running one is shared) and keeps its verdict. */
  refresh(): Promise<ClockVerdict> {
    this.running ??= this.runCheck().then((verdict) => {
      this.running = undefined;
      const changed = verdict.trusted !== this.last.trusted;
      this.last = verdict;
      if (changed) this.onChange?.(verdict);
      return verdict;
    });
    return this.running;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  private runCheck(): Promise<ClockVerdict> {
    switch (this.settings.check) {
      case 'none':
        return Promise.resolve({ trusted: true, source: 'none (not checked)' });
      case 'ntp':
        return checkNtp(this.settings.maxOffsetMs, this.run);
      case 'database':
        if (!this.reference) {
          return Promise.resolve({
            trusted: false,
            source: 'database',
            reason: 'tsa.clock.check is database, but the store has no database server clock (SQLite)',
          });
        }
        return checkDatabase(this.reference, this.settings.maxOffsetMs);
    }
  }
}
