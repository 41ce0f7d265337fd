#!/bin/sh
# The npm package's fallback build (native-src/build.sh once packed): the PKCS#11 module and the daemon's
# peer-credential addon from source, for Linux machines the prebuilt linux-x64 files do not fit. Run by hand, never
# at install time (the package has no install script). Plain cmake for both: the module is an ordinary C library,
# not a Node addon, and the addon builds against the Node-API headers shipped here, so nothing is downloaded.
# Writes <package>/build/native/libsignbridge-pkcs11.so and <package>/build/peercred/peercred.node.
set -eu
src=$(cd "$(dirname "$0")" && pwd)
pkg=$(dirname "$src")
for tool in cmake cc c++; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "signbridge: $tool is missing (Debian: apt-get install cmake build-essential libssl-dev libp11-kit-dev)" >&2
    exit 1
  }
done
cmake -S "$src" -B "$pkg/build" -DCMAKE_BUILD_TYPE=Release -DSIGNBRIDGE_BUILD_TESTS=OFF -DSIGNBRIDGE_WERROR=OFF >/dev/null
cmake --build "$pkg/build" --target signbridge-pkcs11 >/dev/null
cmake -S "$src/peercred" -B "$pkg/build/peercred" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$pkg/build/peercred" >/dev/null
echo "built $pkg/build/native/libsignbridge-pkcs11.so and $pkg/build/peercred/peercred.node"
