import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository (package) root, found from this file whether it runs from src/ (tests) or dist/src/. */
function findPackageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error('signbridge: cannot find the package root');
    dir = parent;
  }
  return dir;
}

export const PACKAGE_ROOT = findPackageRoot();

export function packagePath(...parts: string[]): string {
  return join(PACKAGE_ROOT, ...parts);
}
