// Opens the verification page in a browser where one can be opened: $BROWSER if set (as Python's webbrowser and git
// read it: a command, `%s` for the URL, several separated by ':'), else xdg-open when a display is there. Never
// fails the login: over SSH, in a container or on a build host there is no browser, and the printed URL is enough.
import { spawn } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

/** The command that would open `url`, or undefined when none can be opened here. */
export function browserCommand(url: string, env: NodeJS.ProcessEnv = process.env): string[] | undefined {
  const configured = env.BROWSER?.split(':').find((c) => c.trim().length > 0);
  if (configured) {
    const words = configured.trim().split(/\s+/);
    return words.some((w) => w.includes('%s')) ? words.map((w) => w.replaceAll('%s', url)) : [...words, url];
  }
  if (!env.DISPLAY && !env.WAYLAND_DISPLAY) return undefined;
  return onPath('xdg-open', env) ? ['xdg-open', url] : undefined;
}

/** Starts the browser detached and forgets it; returns whether one was started. */
export function openBrowser(url: string, env: NodeJS.ProcessEnv = process.env): boolean {
  const command = browserCommand(url, env);
  if (!command) return false;
  const [file, ...args] = command as [string, ...string[]];
  try {
    const child = spawn(file, args, { detached: true, stdio: 'ignore', env });
    child.on('error', () => {}); // a missing program is not the login's failure
    child.unref();
    return true;
  } catch {
    return false;
  }
}

function onPath(program: string, env: NodeJS.ProcessEnv): boolean {
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    try {
      accessSync(join(dir, program), constants.X_OK);
      return true;
    } catch {
      // next
    }
  }
  return false;
}
