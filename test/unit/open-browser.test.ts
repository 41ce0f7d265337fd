// Which browser `signbridge login` would start: $BROWSER first (with %s, or several separated by ':'), else
// xdg-open only when there is a display; nothing at all over SSH or in a container.
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { browserCommand } from '../../src/cli/login/open-browser.js';

const URL_ = 'https://signbridge.example.com/device?user_code=BCDF-GHJK';
const bin = mkdtempSync(join(tmpdir(), 'sb-browser-'));
afterAll(() => rmSync(bin, { recursive: true, force: true }));
writeFileSync(join(bin, 'xdg-open'), '#!/bin/sh\n');
chmodSync(join(bin, 'xdg-open'), 0o755);

describe('browserCommand', () => {
  it('uses $BROWSER: the URL appended, or put where %s is; the first of a list', () => {
    expect(browserCommand(URL_, { BROWSER: 'firefox --new-window' })).toEqual(['firefox', '--new-window', URL_]);
    expect(browserCommand(URL_, { BROWSER: 'w3m -o x=%s' })).toEqual(['w3m', '-o', `x=${URL_}`]);
    expect(browserCommand(URL_, { BROWSER: 'lynx:firefox' })).toEqual(['lynx', URL_]);
  });

  it('falls back to xdg-open only with a display and xdg-open on the PATH', () => {
    expect(browserCommand(URL_, { DISPLAY: ':0', PATH: bin })).toEqual(['xdg-open', URL_]);
    expect(browserCommand(URL_, { WAYLAND_DISPLAY: 'wayland-0', PATH: bin })).toEqual(['xdg-open', URL_]);
    expect(browserCommand(URL_, { PATH: bin })).toBeUndefined(); // SSH, container, CI
    expect(browserCommand(URL_, { DISPLAY: ':0', PATH: join(bin, 'none') })).toBeUndefined();
    expect(browserCommand(URL_, { BROWSER: '', PATH: bin })).toBeUndefined();
  });
});
