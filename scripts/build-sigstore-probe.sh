#!/usr/bin/env bash
# Builds test/fixtures/sigstore-go (cosign's own awskms:// signer, from Debian's golang-github-sigstore-sigstore-dev)
# into build/sigstore-go/sigstore-probe, offline: Go in GOPATH mode against Debian's Go sources in /usr/share/gocode,
# no module proxy. Idempotent: it builds again only when the sources, Go or the Debian packages changed.
# Exit status 0: the probe is there and current. Otherwise the last line on stderr says why it cannot be built.
set -euo pipefail
cd "$(dirname "$0")/.."

SRC=test/fixtures/sigstore-go
OUT="$PWD/build/sigstore-go"
GOCODE=/usr/share/gocode
LIBRARY=$GOCODE/src/github.com/sigstore/sigstore/pkg/signature/kms

cannot() {
  printf 'cannot build the sigstore probe: %s\n' "$*" >&2
  exit 1
}

command -v go >/dev/null || cannot 'go is not installed (scripts/setup.sh installs golang-go)'
[ -d "$LIBRARY/aws" ] ||
  cannot "$LIBRARY/aws is missing (scripts/setup.sh installs golang-github-sigstore-sigstore-dev from bookworm-backports)"

# Debian's 1.4.0 leaves out kms/hashivault (Debian has no github.com/hashicorp/vault/api): build it in where present.
TAGS=""
[ -d "$LIBRARY/hashivault" ] && TAGS=sigstore_hashivault

mkdir -p "$OUT"
exec 9>"$OUT/.lock"
flock 9 # test workers may ask for it at the same time

stamp=$(
  {
    sha256sum "$SRC"/*.go
    go version
    echo "tags=$TAGS"
    dpkg-query -W -f='${Package} ${Version}\n' 'golang-github-*' 'golang-golang-x-*' 2>/dev/null || true
  } | sha256sum | cut -d' ' -f1
)
if [ -x "$OUT/sigstore-probe" ] && [ "$(cat "$OUT/stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi

echo "[sigstore-probe] building build/sigstore-go/sigstore-probe ($(go version | cut -d' ' -f3), GOPATH mode, offline)" >&2
(
  cd "$SRC"
  GO111MODULE=off GOPATH="$GOCODE" GOFLAGS='' GOPROXY=off GOTOOLCHAIN=local \
    GOCACHE="$OUT/cache" go build -tags "$TAGS" -o "$OUT/sigstore-probe.new" .
) || cannot "go build failed in $SRC (see above)"
mv -f "$OUT/sigstore-probe.new" "$OUT/sigstore-probe"
echo "$stamp" >"$OUT/stamp"
