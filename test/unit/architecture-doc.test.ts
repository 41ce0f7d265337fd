// docs/architecture.md is the map a newcomer reads first, so it must not drift from the tree: it names every folder
// under src/, wire/ and daemon/ (as `src/<folder>/`, in its layers table or its text), every path it names in
// backticks exists, every bare file name it names is a file somewhere in the repository, and every link it makes
// lands on a file and, with an anchor, on a heading of that file. It does not check the prose: that stays the
// reviewer's.

import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');
const DOC = 'docs/architecture.md';
const text = readFileSync(join(root, DOC), 'utf8');

/** Folders of the repository a backticked path may start with. */
const PATH_ROOTS = ['src/', 'daemon/', 'wire/', 'native/', 'test/', 'docs/', 'bench/', 'scripts/', 'assets/'];

/** The folders under `dir` that hold tracked files (build output such as native addons' build/ folders is not the map's). */
function folders(dir: string): string[] {
  const tracked = execFileSync('git', ['ls-files', '-z', '--', dir], { cwd: root, encoding: 'utf8' }).split('\0');
  const out = new Set<string>();
  for (const file of tracked) {
    for (let folder = dirname(file); folder !== dir && folder.startsWith(`${dir}/`); folder = dirname(folder)) {
      out.add(`${folder}/`);
    }
  }
  return [...out].sort();
}

function fileNames(dir: string, into = new Set<string>()): Set<string> {
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    if (entry.name === 'node_modules' || entry.name.startsWith('.')) continue;
    if (entry.isDirectory()) fileNames(`${dir}/${entry.name}`, into);
    else into.add(entry.name);
  }
  return into;
}

/** Text outside fenced code blocks (the diagrams draw names, they do not cite them). */
const prose = text.replace(/```[\s\S]*?```/g, '');
const backticked = [...prose.matchAll(/`([^`\n]+)`/g)].map((m) => m[1] as string);

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens. */
function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

function anchorsIn(file: string): Set<string> {
  const body = readFileSync(file, 'utf8').replace(/```[\s\S]*?```/g, '');
  return new Set([...body.matchAll(/^#{1,6}\s+(.+)$/gm)].map((m) => anchorOf(m[1] as string)));
}

describe('docs/architecture.md', () => {
  it('names every folder under src/, wire/ and daemon/', () => {
    const all = [...folders('src'), ...folders('wire'), ...folders('daemon')];
    expect(all.filter((folder) => !text.includes(`\`${folder}\``))).toEqual([]);
  });

  it('names only paths that exist', () => {
    const paths = backticked.filter((token) => PATH_ROOTS.some((r) => token.startsWith(r)) && !/[\s*<>]/.test(token));
    expect(paths.length).toBeGreaterThan(50);
    expect(paths.filter((path) => !existsSync(join(root, path)))).toEqual([]);
  });

  it('names only files that exist somewhere in the repository', () => {
    const names = new Set<string>();
    for (const dir of ['src', 'daemon', 'wire', 'native', 'test', 'docs', 'bench', 'scripts']) fileNames(dir, names);
    const bare = backticked.filter((token) => /^[\w.-]+\.(ts|cjs|mjs|c|h|cc)$/.test(token));
    expect(bare.filter((name) => !names.has(name))).toEqual([]);
  });

  it('links only to files and headings that exist', () => {
    const broken: string[] = [];
    for (const m of prose.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1] as string;
      if (/^[a-z]+:/.test(target)) continue;
      const [file, anchor] = target.split('#') as [string, string | undefined];
      const path = file === '' ? join(root, DOC) : normalize(join(root, dirname(DOC), file));
      if (!existsSync(path)) broken.push(target);
      else if (anchor !== undefined && path.endsWith('.md') && !anchorsIn(path).has(anchor)) broken.push(target);
    }
    expect(broken).toEqual([]);
  });
});
