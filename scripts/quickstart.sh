#!/usr/bin/env bash
# The main job on the embedded default: the service (SQLite + SoftHSM) in a fresh data dir, demo tenants with an
# RSA-2048 and a P-256 key, a hash signed through the API and verified by OpenSSL; then the build-host daemon,
# self-signed certificates made through it, and real tools signing through the PKCS#11 module
# (libsignbridge-pkcs11.so): osslsigncode signs a PE, jarsigner a JAR, OpenSSL (pkcs11-provider) and pkcs11-tool
# a file; each is verified by its own verifier. Prints a table; everything it starts, it stops.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
# fail STEP [LOG]: names the step that failed and shows the end of the log that explains it.
fail() {
  printf '\nquickstart FAILED at: %s\n' "$1" >&2
  local log=${2:-${DATA:-}/server.log}
  [ -f "$log" ] && { echo "--- last lines of $log:" >&2; tail -20 "$log" >&2; }
  echo "Fix the cause above and run the quick start again (it starts from a fresh data dir each time)." >&2
  exit 1
}
json() { node -e 'let d="";process.stdin.on("data",c=>d+=c).on("end",()=>{const v=JSON.parse(d)[process.argv[1]];if(v===undefined){console.error(d);process.exit(1)}process.stdout.write(String(v))})' "$1"; }

step "installing and building (scripts/setup.sh)"
bash scripts/setup.sh || fail "setup: see the messages above"

DATA=${SIGNBRIDGE_QUICKSTART_DIR:-$PWD/.data/quickstart}
rm -rf "$DATA"; mkdir -p "$DATA"; chmod 700 "$DATA"
WORK="$DATA/demo"; mkdir -p "$WORK"
PORT=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
URL="http://127.0.0.1:$PORT"
SB="node bin/signbridge.js"

step "making the service's time-stamping authority (signbridge tsa init: P-256 key in SoftHSM, self-signed for the demo)"
$SB tsa init --data-dir "$DATA" --key-spec ECC_NIST_P256 --self-signed --subject "CN=signbridge quickstart TSA" \
  >"$DATA/tsa-init.log" 2>&1 || fail "tsa init" "$DATA/tsa-init.log"
cat "$DATA/tsa-init.log"
# A TSA states this host's time to the world, so by default it needs the host to show NTP synchronisation
# (tsa.clock.check: ntp). A fresh VM or container often cannot show it; the demo runs unchecked unless told otherwise.
export SIGNBRIDGE_TSA_CLOCK_CHECK=${SIGNBRIDGE_TSA_CLOCK_CHECK:-none}
echo "clock check for time-stamps: $SIGNBRIDGE_TSA_CLOCK_CHECK (none: for trials only; docs/tsa.md)"

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

step "creating an operator API key"
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
step "create_tenant demo-ec (ECC_NIST_P256 key in SoftHSM)"
call create_tenant "$OPERATOR" '"tenant_id":"demo-ec","key_spec":"ECC_NIST_P256"' | json key >/dev/null || fail "create_tenant demo-ec"
SIGNER_EC=$($SB admin api-key create --data-dir "$DATA" --role signer --tenant demo-ec --label quickstart) || fail "signer key"

step "signing the SHA-256 hash of a file through POST /v1/sign"
printf 'signbridge quickstart %s\n' "$(date -u +%FT%TZ)" >"$WORK/artifact.txt"
HASH=$(openssl dgst -sha256 -binary "$WORK/artifact.txt" | base64 | tr '+/' '-_')
SIGNED=$(call sign "$SIGNER" "\"tenant_id\":\"demo\",\"hash\":\"$HASH\",\"algorithm\":\"RSASSA_PKCS1_V1_5_SHA_256\"")
echo "$SIGNED" | json signature | base64 -d >"$WORK/artifact.sig" || fail "sign"

step "fetching the public key (get_public_key) and verifying with openssl"
call get_public_key "$SIGNER" '"tenant_id":"demo"' | json public_key_pem >"$WORK/demo-public.pem" || fail "get_public_key"
VERIFY=$(openssl dgst -sha256 -verify "$WORK/demo-public.pem" -signature "$WORK/artifact.sig" "$WORK/artifact.txt") \
  || fail "openssl could not verify the signature"

step "starting the build-host daemon (signbridge daemon) for tenants demo and demo-ec"
install -m 600 /dev/null "$WORK/demo.key" && printf '%s\n' "$SIGNER" >"$WORK/demo.key"
install -m 600 /dev/null "$WORK/demo-ec.key" && printf '%s\n' "$SIGNER_EC" >"$WORK/demo-ec.key"
SOCKET="$DATA/run/daemon.sock"
cat >"$WORK/daemon.yaml" <<YAML
socket: $SOCKET
certificateDir: $DATA/certificates
service:
  url: $URL
tenants:
  - id: demo
    apiKeyFile: demo.key
  - id: demo-ec
    apiKeyFile: demo-ec.key
YAML
$SB daemon --config "$WORK/daemon.yaml" >"$DATA/daemon.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 1 100); do [ -S "$SOCKET" ] && break; kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.1; done
[ -S "$SOCKET" ] || fail "the daemon did not start" "$DATA/daemon.log"
export SIGNBRIDGE_SOCKET="$SOCKET"
$SB status || fail "signbridge status: the daemon cannot reach the service" "$DATA/daemon.log"
MODULE=$($SB module-path) || fail "the PKCS#11 module is not built (run scripts/setup.sh)"
KEY_EC=$(call get_public_key "$SIGNER_EC" '"tenant_id":"demo-ec"' | json key_id) || fail "get_public_key demo-ec"
call get_public_key "$SIGNER_EC" '"tenant_id":"demo-ec"' | json public_key_pem >"$WORK/demo-ec-public.pem"

step "self-signed code-signing certificates, signed through the daemon and registered with it (signbridge cert)"
$SB cert self-signed --tenant demo --subject "/O=signbridge quickstart/CN=demo RSA signing" --days 30 \
  --out "$WORK/demo.pem" --import || fail "signbridge cert self-signed for demo" "$DATA/daemon.log"
$SB cert self-signed --tenant demo-ec --subject "/O=signbridge quickstart/CN=demo EC signing" --days 30 \
  --out "$WORK/demo-ec.pem" --import || fail "signbridge cert self-signed for demo-ec" "$DATA/daemon.log"

ROWS=()
row() { ROWS+=("$(printf '%-22s %-34s %-22s %s' "$1" "$2" "$3" "$4")"); }
row "artifact.txt" "POST /v1/sign (API)" "demo RSA_2048" "openssl dgst -verify: ok"

step "pkcs11-tool signs a file through the module (SHA256-RSA-PKCS)"
printf 'signed through PKCS#11 %s\n' "$(date -u +%FT%TZ)" >"$WORK/module-artifact.txt"
pkcs11-tool --module "$MODULE" --token-label demo --sign --mechanism SHA256-RSA-PKCS \
  --input-file "$WORK/module-artifact.txt" --output-file "$WORK/module-artifact.sig" >/dev/null 2>"$DATA/pkcs11-tool.log" \
  || fail "pkcs11-tool --sign through the module" "$DATA/pkcs11-tool.log"
openssl dgst -sha256 -verify "$WORK/demo-public.pem" -signature "$WORK/module-artifact.sig" "$WORK/module-artifact.txt" \
  >/dev/null || fail "openssl could not verify the module's signature"
row "module-artifact.txt" "pkcs11-tool" "demo RSA_2048" "openssl dgst -verify: ok"

step "OpenSSL 3 with pkcs11-provider signs a file with the EC key through the module"
$SB openssl-config --out "$WORK/openssl.cnf" || fail "signbridge openssl-config"
printf 'release tarball stand-in %s\n' "$(date -u +%FT%TZ)" >"$WORK/release.txt"
OPENSSL_CONF="$WORK/openssl.cnf" openssl dgst -sha256 -sign "pkcs11:token=demo-ec;type=private" \
  -out "$WORK/release.sig" "$WORK/release.txt" 2>"$DATA/openssl.log" || fail "openssl dgst -sign" "$DATA/openssl.log"
openssl dgst -sha256 -verify "$WORK/demo-ec-public.pem" -signature "$WORK/release.sig" "$WORK/release.txt" >/dev/null \
  || fail "openssl could not verify the EC signature"
row "release.txt" "openssl dgst (pkcs11-provider)" "demo-ec ECC_NIST_P256" "openssl dgst -verify: ok"

step "osslsigncode signs a Windows PE (built with mingw) through the libp11 engine and the module, time-stamped by $URL/tsa"
curl -fsS "$URL/tsa/chain.pem" -o "$WORK/tsa-chain.pem" || fail "GET /tsa/chain.pem"
printf '#include <stdio.h>\nint main(void){puts("hello from signbridge");return 0;}\n' >"$WORK/hello.c"
x86_64-w64-mingw32-gcc -O2 -o "$WORK/hello.exe" "$WORK/hello.c" || fail "mingw could not build hello.exe"
osslsigncode sign -pkcs11engine /usr/lib/x86_64-linux-gnu/engines-3/pkcs11.so -pkcs11module "$MODULE" \
  -pkcs11cert "pkcs11:token=demo;object=$KEY_ID;type=cert" -key "pkcs11:token=demo;type=private" \
  -h sha256 -n "signbridge quickstart" -ts "$URL/tsa" -in "$WORK/hello.exe" -out "$WORK/hello-signed.exe" \
  >"$DATA/osslsigncode.log" 2>&1 || fail "osslsigncode sign" "$DATA/osslsigncode.log"
osslsigncode verify -CAfile "$WORK/demo.pem" -TSA-CAfile "$WORK/tsa-chain.pem" -in "$WORK/hello-signed.exe" \
  >>"$DATA/osslsigncode.log" 2>&1 || fail "osslsigncode verify" "$DATA/osslsigncode.log"
grep -q 'Timestamp Server Signature verification: ok' "$DATA/osslsigncode.log" \
  || fail "osslsigncode did not verify the time-stamp" "$DATA/osslsigncode.log"
row "hello-signed.exe" "osslsigncode (libp11 engine)" "demo RSA_2048" "osslsigncode verify: ok, time-stamp ok"

step "jarsigner signs a JAR with the EC key through SunPKCS11 and the module, time-stamped by $URL/tsa"
printf 'name = signbridge\nlibrary = %s\nslotListIndex = 1\n' "$MODULE" >"$WORK/signbridge-pkcs11.cfg"
printf 'hello from signbridge\n' >"$WORK/Hello.txt"
(cd "$WORK" && jar cf app.jar Hello.txt) || fail "jar could not build app.jar"
(cd "$WORK" && jarsigner -keystore NONE -storetype PKCS11 -providerClass sun.security.pkcs11.SunPKCS11 \
  -providerArg signbridge-pkcs11.cfg -storepass 0000 -tsa "$URL/tsa" -signedjar app-signed.jar app.jar "$KEY_EC") \
  >"$DATA/jarsigner.log" 2>&1 || fail "jarsigner" "$DATA/jarsigner.log"
rm -f "$WORK/trust.p12"
keytool -importcert -noprompt -alias demo-ec -file "$WORK/demo-ec.pem" -keystore "$WORK/trust.p12" -storetype PKCS12 \
  -storepass changeit >>"$DATA/jarsigner.log" 2>&1 || fail "keytool -importcert" "$DATA/jarsigner.log"
keytool -importcert -noprompt -alias tsa -file "$WORK/tsa-chain.pem" -keystore "$WORK/trust.p12" -storetype PKCS12 \
  -storepass changeit >>"$DATA/jarsigner.log" 2>&1 || fail "keytool -importcert (TSA)" "$DATA/jarsigner.log"
jarsigner -verify -strict -verbose -keystore "$WORK/trust.p12" -storepass changeit "$WORK/app-signed.jar" \
  >>"$DATA/jarsigner.log" 2>&1 || fail "jarsigner -verify" "$DATA/jarsigner.log"
grep -q 'jar verified' "$DATA/jarsigner.log" || fail "jarsigner did not report the jar verified" "$DATA/jarsigner.log"
grep -q 'Timestamped by "CN=signbridge quickstart TSA"' "$DATA/jarsigner.log" \
  || fail "jarsigner did not show the time-stamp" "$DATA/jarsigner.log"
row "app-signed.jar" "jarsigner (SunPKCS11)" "demo-ec ECC_NIST_P256" "jarsigner -verify -strict: ok, time-stamped"

step "done: everything below was signed with keys that stayed in SoftHSM, and verified"
echo "  service  $URL  (SQLite + SoftHSM in $DATA)"
echo "  module   $MODULE"
echo "  files    $WORK"
echo
printf '  %-22s %-34s %-22s %s\n' "file" "signed by" "key" "verified by"
for r in "${ROWS[@]}"; do printf '  %s\n' "$r"; done
