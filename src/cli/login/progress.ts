// The "still waiting" display while the device flow polls: one line redrawn in place on a terminal, and on
// anything else (a CI log, a test) a line now and then, so a log does not fill with one line per poll.
const FRAMES = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

export class WaitingLine {
  private frame = 0;
  private drawn = false;
  private lastMinutes: number | undefined;

  constructor(private readonly out: NodeJS.WriteStream) {}

  update(secondsLeft: number): void {
    const left = `${Math.floor(secondsLeft / 60)}:${String(secondsLeft % 60).padStart(2, '0')}`;
    if (this.out.isTTY) {
      this.frame = (this.frame + 1) % FRAMES.length;
      this.out.write(`\r\x1b[K${FRAMES[this.frame]} waiting for the confirmation in the browser (${left} left)`);
      this.drawn = true;
      return;
    }
    const minutes = Math.ceil(secondsLeft / 60);
    if (minutes !== this.lastMinutes) {
      this.lastMinutes = minutes;
      this.out.write(`waiting for the confirmation in the browser (${left} left)\n`);
    }
  }

  /** A line of its own (a retry, a slow_down), then the waiting line again at the next update. */
  note(text: string): void {
    this.clear();
    this.out.write(`${text}\n`);
  }

  clear(): void {
    if (this.drawn) this.out.write('\r\x1b[K');
    this.drawn = false;
  }
}

/** 42 s, 9 min, 11 h 59 min. */
export function fmt(seconds: number): string {
  if (seconds < 60) return `${Math.max(0, Math.round(seconds * 10) / 10)} s`;
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min`;
  return `${Math.floor(minutes / 60)} h${minutes % 60 ? ` ${minutes % 60} min` : ''}`;
}
