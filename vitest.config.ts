import { configDefaults, defineConfig } from 'vitest/config';

// test/packages install the client .deb on this machine (a system-wide p11-kit registration that the p11-kit tests
// would see) and start daemons from installed packages: they run as a step of their own, after `npm run package`,
// when named on the command line (`vitest run test/packages`), never beside the rest of the suite.
const packagesNamed = process.argv.some((arg) => arg.replace(/^\.\//, '').startsWith('test/packages'));

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    exclude: packagesNamed ? configDefaults.exclude : [...configDefaults.exclude, 'test/packages/**'],
    globalSetup: ['test/global-setup.ts'],
    // Names a test that holds its worker's event loop long enough to time out vitest's own reports (test/helpers/loop-watch.ts).
    setupFiles: ['test/helpers/loop-watch.ts'],
    // One process per test file: PKCS#11 modules are initialised once per process (SoftHSM reads its
    // configuration then), so files must not share a process.
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 120_000,
    reporters: ['default'],
  },
});
