#!/usr/bin/env bash
# The main job on the embedded default: service (SQLite + SoftHSM) in a fresh data dir, a demo tenant with an
# RSA-2048 key, a SHA-256 hash signed through the API and verified by OpenSSL with the public key from
# get_public_key; then the build-host daemon, and a file signed through the PKCS#11 module
# (libsignbridge-pkcs11.so, loaded by pkcs11-tool), verified by OpenSSL. Everything it starts, it stops.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
fail() { printf '\nquickstart FAILED at: %s\n' "$*" >&2; [ -f "${DATA:-}/server.log" ] && { echo "--- last lines of $DATA/server.log:" >&2; tail -20 "$DATA/server.log" >&2; }; exit 1; }
json() { node -e 'let d="";process.stdin.on("data",c=>d+=c).on("end",()=>{const v=JSON.parse(d)[process.argv[1]];if(v===undefined){console.error(d);process.exit(1)}process.stdout.write(String(v))})' "$1"; }

step "installing and building (scripts/setup.sh)"
bash scripts/setup.sh || fail "setup: see the messages above"

DATA=${SIGNBRIDGE_QUICKSTART_DIR:-$PWD/.data/quickstart}
rm -rf "$DATA"; mkdir -p "$DATA"; chmod 700 "$DATA"
WORK="$DATA/demo"; mkdir -p "$WORK"
PORT=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
URL="http://127.0.0.1:$PORT"
SB="node bin/signbridge.js"

step "starting the service on $URL (data dir $DATA)"
$SB server --data-dir "$DATA" --listen "127.0.0.1:$PORT" >"$DATA/server.log" 2>&1 &
SERVER_PID=$!
DAEMON_PID=""
cleanup() {
  [ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
  kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 1 100); do
  curl -fsS "$URL/readyz" >/dev/null 2>&1 && break
  kill -0 "$SERVER_PID" 2>/dev/null || fail "the service exited during start-up"
  sleep 0.1
done
curl -fsS "$URL/readyz" >/dev/null || fail "the service did not become ready in 10 s"
echo "ready: $(curl -fsS "$URL/readyz")"

step "creating API keys (operator, then a signer for tenant demo)"
OPERATOR=$($SB admin api-key create --data-dir "$DATA" --role operator --label quickstart) || fail "admin api-key create"

call() { # action, token, json-body-without-action
  curl -sS -X POST "$URL/v1/$1" -H "authorization: Bearer $2" -H 'content-type: application/json' \
    -d "{\"action\":\"$1\",$3}"
}

step "create_tenant demo (RSA_2048 key in SoftHSM)"
CREATED=$(call create_tenant "$OPERATOR" '"tenant_id":"demo","key_spec":"RSA_2048"')
echo "$CREATED"
KEY_ID=$(echo "$CREATED" | json key) || fail "create_tenant"
SIGNER=$($SB admin api-key create --data-dir "$DATA" --role signer --tenant demo --label quickstart) || fail "signer key"

step "signing the SHA-256 hash of a file through POST /v1/sign"
printf 'signbridge quickstart %s\n' "$(date -u +%FT%TZ)" >"$WORK/artifact.txt"
HASH=$(openssl dgst -sha256 -binary "$WORK/artifact.txt" | base64 | tr '+/' '-_')
SIGNED=$(call sign "$SIGNER" "\"tenant_id\":\"demo\",\"hash\":\"$HASH\",\"algorithm\":\"RSASSA_PKCS1_V1_5_SHA_256\"")
echo "$SIGNED" | json signature | base64 -d >"$WORK/artifact.sig" || fail "sign"

step "fetching the public key (get_public_key) and verifying with openssl"
call get_public_key "$SIGNER" '"tenant_id":"demo"' | json public_key_pem >"$WORK/demo-public.pem" || fail "get_public_key"
VERIFY=$(openssl dgst -sha256 -verify "$WORK/demo-public.pem" -signature "$WORK/artifact.sig" "$WORK/artifact.txt") \
  || fail "openssl could not verify the signature"

step "starting the build-host daemon (signbridge daemon) for tenant demo"
install -m 600 /dev/null "$WORK/signer.key" && printf '%s\n' "$SIGNER" >"$WORK/signer.key"
SOCKET="$DATA/run/daemon.sock"
$SB daemon --socket "$SOCKET" --service-url "$URL" --api-key-file "$WORK/signer.key" --tenant demo \
  >"$DATA/daemon.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 1 100); do [ -S "$SOCKET" ] && break; sleep 0.1; done
[ -S "$SOCKET" ] || fail "the daemon did not start (see $DATA/daemon.log)"
SIGNBRIDGE_SOCKET="$SOCKET" $SB status || fail "signbridge status"

step "signing a file through the PKCS#11 module (pkcs11-tool -> libsignbridge-pkcs11.so -> daemon -> service)"
MODULE=$($SB module-path) || fail "the PKCS#11 module is not built"
printf 'signed through PKCS#11 %s\n' "$(date -u +%FT%TZ)" >"$WORK/module-artifact.txt"
SIGNBRIDGE_SOCKET="$SOCKET" pkcs11-tool --module "$MODULE" --token-label demo --sign --mechanism SHA256-RSA-PKCS \
  --input-file "$WORK/module-artifact.txt" --output-file "$WORK/module-artifact.sig" >/dev/null 2>"$DATA/pkcs11-tool.log" \
  || fail "pkcs11-tool --sign through the module (see $DATA/pkcs11-tool.log)"
MODULE_VERIFY=$(openssl dgst -sha256 -verify "$WORK/demo-public.pem" -signature "$WORK/module-artifact.sig" "$WORK/module-artifact.txt") \
  || fail "openssl could not verify the module's signature"

step "done"
cat <<SUMMARY
  service     $URL  (SQLite + SoftHSM in $DATA)
  tenant      demo, key $KEY_ID (RSA_2048)
  signed      $WORK/artifact.txt  (SHA-256, RSASSA_PKCS1_V1_5_SHA_256)
  signature   $WORK/artifact.sig ($(stat -c %s "$WORK/artifact.sig") bytes)
  public key  $WORK/demo-public.pem
  openssl     $VERIFY
  module      $MODULE
  signed      $WORK/module-artifact.txt through PKCS#11 (SHA256-RSA-PKCS)
  openssl     $MODULE_VERIFY
SUMMARY
