#!/usr/bin/env bash
# The service as an OCI image, without a Docker daemon (`npm run package -- oci`, docs/packages.md#the-oci-image):
#   build-image.sh SERVICE_TARBALL OUT.oci.tar VERSION
# A Debian 12 root file system from Debian's own packages (mmdebstrap, minbase, merged /usr) with what the service
# loads at run time (SoftHSM for the embedded default, CA certificates, libstdc++), the service tarball's contents
# in /opt/signbridge, a user `signbridge` (uid/gid 10001) owning the volume /var/lib/signbridge, committed by
# buildah as an OCI archive with one gzip layer. Needs root, buildah and mmdebstrap (Debian packages).
# The Debian mirror is the one this machine's apt uses. Downloaded .debs are kept in build/packages/oci-debs/.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
log() { printf '[package] %s\n' "$*" >&2; }

TARBALL=$1 OUT_FILE=$2 VERSION=$3
WORK=$ROOT/build/packages/oci
DEBS=$ROOT/build/packages/oci-debs
UID_GID=10001
# What the service loads at run time besides the tarball: SoftHSM (the embedded default's key store), CA
# certificates (an HTTPS IdP, AWS KMS), libstdc++ (the carried Node and the native addons). usr-is-merged keeps
# init-system-helpers from pulling usrmerge and Perl in (the merged-usr hook lays out the symlinks itself).
PACKAGES=usr-is-merged,softhsm2,ca-certificates,libstdc++6

for tool in buildah mmdebstrap; do
  command -v "$tool" >/dev/null || { log "$tool is missing: apt-get install buildah mmdebstrap"; exit 1; }
done
[ "$(id -u)" = 0 ] || { log "the image is built as root (buildah's storage, mmdebstrap's chroot)"; exit 1; }

# `deb URI SUITE main` for each bookworm suite this machine's apt reads (deb822 first, then the one-line format):
# the mirror is whatever the host uses, never a name written here.
mirror_lines() {
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    awk '/^Types:/{t=/ deb( |$)/} /^URIs:/{u=$2}
      /^Suites:/ && t {for (i = 2; i <= NF; i++) if ($i ~ /^bookworm(-updates|-security)?$/) print "deb " u " " $i " main"}' \
      /etc/apt/sources.list.d/debian.sources
  fi
  if [ -f /etc/apt/sources.list ]; then
    awk '$1=="deb" && $3 ~ /^bookworm(-updates|-security|\/updates)?$/ {print "deb " $2 " " $3 " main"}' /etc/apt/sources.list
  fi
}
mapfile -t MIRRORS < <(mirror_lines | awk '!seen[$0]++')
[ "${#MIRRORS[@]}" -gt 0 ] || { log "no bookworm suite in /etc/apt to build the image's root file system from"; exit 1; }

# Reproducible-ish: file times, the image's creation time and its label from the last commit.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH
CREATED=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)

ctr=""
cleanup() {
  if [ -n "$ctr" ]; then
    buildah umount "$ctr" >/dev/null 2>&1 || true
    buildah rm "$ctr" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

rm -rf "$WORK" && mkdir -p "$WORK" "$DEBS"
ctr=$(buildah from --name "signbridge-oci-$$" scratch)
rootfs=$(buildah mount "$ctr")

log "building the image's Debian 12 root file system (mmdebstrap minbase + ${PACKAGES//,/ })"
# No manuals, documentation (but the copyright files), locales: nothing in the image reads them.
mmdebstrap --variant=minbase --include="$PACKAGES" --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
  --skip=essential/unlink \
  --setup-hook="mkdir -p \"\$1/var/cache/apt/archives\" && find '$DEBS' -name '*.deb' -exec cp -t \"\$1/var/cache/apt/archives\" {} +" \
  --customize-hook="find \"\$1/var/cache/apt/archives\" -name '*.deb' -exec cp -u -t '$DEBS' {} +" \
  bookworm "$rootfs" "${MIRRORS[@]}" >"$WORK/mmdebstrap.log" 2>&1 ||
  { cat "$WORK/mmdebstrap.log" >&2; exit 1; }

log "adding the service tarball and the user signbridge ($UID_GID)"
mkdir -p "$rootfs/opt/signbridge"
tar -xzf "$TARBALL" -C "$rootfs/opt/signbridge" --strip-components=1 --no-same-owner
chroot "$rootfs" groupadd --gid "$UID_GID" signbridge
chroot "$rootfs" useradd --no-log-init --uid "$UID_GID" --gid signbridge --home-dir /var/lib/signbridge \
  --no-create-home --shell /usr/sbin/nologin signbridge
install -d -m 0700 -o "$UID_GID" -g "$UID_GID" "$rootfs/var/lib/signbridge"
# What the build leaves that differs per run and nothing reads (mmdebstrap already emptied apt's lists and cache).
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/var/cache/debconf/*-old \
  "$rootfs"/var/cache/ldconfig/aux-cache "$rootfs"/var/log/* "$rootfs"/etc/*- "$rootfs"/tmp/* \
  "$rootfs/opt/signbridge/systemd"
: >"$rootfs/etc/machine-id"

# NODE_OPTIONS: V8 would size the primary's young generation for the host's memory (128 MB on a 23 GB host) and fill
# it under load; 16 MB, as workerMemory.semiSpaceMb gives each request worker (docs/deployment.md "Memory").
buildah config \
  --entrypoint '["/opt/signbridge/bin/signbridge"]' \
  --cmd '["server", "--data-dir", "/var/lib/signbridge"]' \
  --env SIGNBRIDGE_LISTEN=0.0.0.0:8080 \
  --env NODE_OPTIONS=--max-semi-space-size=8 \
  --port 8080/tcp \
  --volume /var/lib/signbridge \
  --workingdir /var/lib/signbridge \
  --user "$UID_GID:$UID_GID" \
  --stop-signal SIGTERM \
  --created-by "packaging/oci/build-image.sh (buildah, mmdebstrap)" \
  --label org.opencontainers.image.title=signbridge-service \
  --label "org.opencontainers.image.description=signbridge signing service (Node.js 24 on Debian 12)" \
  --label "org.opencontainers.image.version=$VERSION" \
  --label "org.opencontainers.image.revision=$REVISION" \
  --label "org.opencontainers.image.created=$CREATED" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  "$ctr"

log "committing the OCI archive"
buildah umount "$ctr" >/dev/null
rm -f "$OUT_FILE"
buildah commit --quiet --format oci --disable-compression=false --timestamp "$SOURCE_DATE_EPOCH" \
  --identity-label=false --rm "$ctr" "oci-archive:$OUT_FILE:signbridge-service:$VERSION" >/dev/null
ctr=""
log "wrote ${OUT_FILE#"$ROOT"/}"
