#!/usr/bin/env bash
# The test command: installs what is missing, builds, lints, type-checks and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "[test] lint (biome)" >&2
node_modules/.bin/biome check .
echo "[test] type-check" >&2
node_modules/.bin/tsc -p tsconfig.json --noEmit
echo "[test] native module (ctest: C tests against a fake daemon, pkcs11-tool --test)" >&2
ctest --test-dir build --output-on-failure
echo "[test] vitest (with a private PostgreSQL cluster for the run: test/global-setup.ts)" >&2
SIGNBRIDGE_REQUIRE_POSTGRES=1 node_modules/.bin/vitest run "$@"
if [ "$#" -eq 0 ]; then
  # Every API test again with the service on PostgreSQL (test/helpers/service.ts: a fresh database per service),
  # and the people and trust-rule admin commands with --database.
  echo "[test] vitest test/api and test/cli/admin-people on PostgreSQL (SIGNBRIDGE_TEST_STORE=postgres)" >&2
  SIGNBRIDGE_REQUIRE_POSTGRES=1 SIGNBRIDGE_TEST_STORE=postgres node_modules/.bin/vitest run test/api \
    test/cli/admin-people.test.ts test/cli/admin-trust.test.ts
fi
