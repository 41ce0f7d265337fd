#!/usr/bin/env bash
# Builds the daemon's SO_PEERCRED addon into daemon/native/peercred/build/Release/peercred.node.
# cmake-js runs from the package root so that it reads package.json ("binary.napi_versions": bundled headers,
# no download). Quick and quiet when already built; pass --force to rebuild.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="$here/build/Release/peercred.node"
if [ "${1:-}" != "--force" ] && [ -f "$out" ] && [ "$out" -nt "$here/peercred.cc" ] && [ "$out" -nt "$here/CMakeLists.txt" ]; then
  exit 0
fi
cd "$root"
node_modules/.bin/cmake-js build --directory "$here" --out "$here/build" --config Release >"$here/build.log" 2>&1 || {
  cat "$here/build.log" >&2
  echo "peercred: build failed (log above)" >&2
  exit 1
}
[ -f "$out" ] || { echo "peercred: build finished but $out is missing" >&2; exit 1; }
