// The CLI tests run the compiled program (bin/signbridge.js -> dist/), so compile once before any test.
import { execFileSync } from 'node:child_process';

export default function setup(): void {
  execFileSync('node_modules/.bin/tsc', ['-p', 'tsconfig.build.json'], { stdio: 'inherit' });
}
