import { existsSync, readFileSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));

/** The repository (package) root, found from this file whether it runs from src/ (tests) or dist/src/. */
function findPackageRoot(): string {
  let dir = HERE;
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error('signbridge: cannot find the package root');
    dir = parent;
  }
  return dir;
}

let packageRoot: string | undefined;

/** Found on first use: an installed client (the .deb) has no package.json above its bundle and never asks. */
export function packageRootDir(): string {
  packageRoot ??= findPackageRoot();
  return packageRoot;
}

export function packagePath(...parts: string[]): string {
  return join(packageRootDir(), ...parts);
}

/**
 * The native files the client loads. A checkout (and the service tarball) finds them where scripts/setup.sh builds
 * them; an installed client package says where it put them in `signbridge-layout.json` beside its bundle
 * (packaging/: the .deb and the npm package write it). This is the one place that knows both layouts.
 */
export type NativeFile = 'pkcs11Module' | 'peercredAddon';

/** The file a package writes beside its bundle: for each native file, candidate paths (relative to that folder). */
export const LAYOUT_FILE_NAME = 'signbridge-layout.json';

const CHECKOUT_LAYOUT: Record<NativeFile, string[]> = {
  pkcs11Module: [join('build', 'native', 'libsignbridge-pkcs11.so')],
  peercredAddon: [join('daemon', 'native', 'peercred', 'build', 'Release', 'peercred.node')],
};

/**
 * The layout file beside a package's bundle, parsed; undefined in a checkout (no such file). A file that is not a
 * JSON object (a damaged install) is refused with its path and what to do, not a parser's stack trace.
 */
function readLayout(layoutDir: string): { file: string; layout: Record<string, unknown> } | undefined {
  const file = join(layoutDir, LAYOUT_FILE_NAME);
  if (!existsSync(file)) return undefined;
  let layout: unknown;
  try {
    layout = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new Error(`signbridge: ${file} cannot be read (${(err as Error).message}); reinstall the client package`);
  }
  if (typeof layout !== 'object' || layout === null || Array.isArray(layout)) {
    throw new Error(`signbridge: ${file} is not a JSON object; reinstall the client package`);
  }
  return { file, layout: layout as Record<string, unknown> };
}

/** The candidate paths for each native file, absolute; the first that exists wins. */
export function nativeCandidates(
  layoutDir: string = HERE,
  checkoutRoot: () => string = packageRootDir,
): Record<NativeFile, string[]> {
  const read = readLayout(layoutDir);
  if (!read) {
    const root = checkoutRoot();
    return {
      pkcs11Module: CHECKOUT_LAYOUT.pkcs11Module.map((p) => join(root, p)),
      peercredAddon: CHECKOUT_LAYOUT.peercredAddon.map((p) => join(root, p)),
    };
  }
  const { file, layout } = read;
  const list = (name: NativeFile): string[] => {
    const value = layout[name];
    if (!Array.isArray(value) || value.length === 0 || !value.every((v) => typeof v === 'string')) {
      throw new Error(`signbridge: ${file} names no ${name}`);
    }
    return value.map((p: string) => (isAbsolute(p) ? p : resolve(layoutDir, p)));
  };
  return { pkcs11Module: list('pkcs11Module'), peercredAddon: list('peercredAddon') };
}

/** What to do when a native file is missing: build it in a checkout; a package's layout file says for itself. */
export function nativeMissingHint(layoutDir: string = HERE): string {
  const read = readLayout(layoutDir);
  if (!read) return 'run scripts/setup.sh';
  const hint = read.layout.missingHint;
  return typeof hint === 'string' ? hint : 'reinstall the signbridge client package';
}

/** Where a native file is: the first candidate that exists, else the first candidate (for the error message). */
export function nativePath(name: NativeFile, candidates: Record<NativeFile, string[]> = nativeCandidates()): string {
  const paths = candidates[name];
  return paths.find((p) => existsSync(p)) ?? (paths[0] as string);
}

/** True when this code runs from an installed client package rather than a checkout. */
export const INSTALLED_PACKAGE = existsSync(join(HERE, LAYOUT_FILE_NAME));
