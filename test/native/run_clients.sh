#!/bin/sh
# Real clients against the module and the fake daemon: OpenSSL 3 with pkcs11-provider, osslsigncode with the libp11
# engine, jarsigner with SunPKCS11. Each signature is verified independently. A client that is not installed is
# skipped (exit 77 when none is).
#   run_clients.sh FAKE_DAEMON MODULE
set -u
fake=$1 module=$2
provider=/usr/lib/x86_64-linux-gnu/ossl-modules/pkcs11.so
engine=/usr/lib/x86_64-linux-gnu/engines-3/pkcs11.so
dir=$(mktemp -d /tmp/sbp11-clients-XXXXXX)
"$fake" "$dir/daemon.sock" >"$dir/ready" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -s "$dir/ready" ] && break; sleep 0.1; done
[ -s "$dir/ready" ] || { echo "fake daemon did not start"; exit 1; }
export SIGNBRIDGE_SOCKET="$dir/daemon.sock" SIGNBRIDGE_LOG="$dir/module.log"
cd "$dir" || exit 1
status=0 ran=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; status=1; }
printf 'signed by a real client\n' >msg

if [ -f "$provider" ]; then
  ran=1
  cat >openssl.cnf <<CNF
openssl_conf = openssl_init
[openssl_init]
providers = provider_sect
[provider_sect]
default = default_sect
pkcs11 = pkcs11_sect
[default_sect]
activate = 1
[pkcs11_sect]
module = $provider
pkcs11-module-path = $module
pkcs11-module-quirks = no-deinit
activate = 1
CNF
  uri() { echo "pkcs11:token=fake%20$1;type=$2"; }
  for t in rsa p256 p384 p521; do
    OPENSSL_CONF=openssl.cnf openssl pkey -pubin -in "$(uri $t public)" -out "$t.pub.pem" 2>/dev/null ||
      fail "pkcs11-provider: public key of $t"
  done
  ossl_sign() { # token digest label [sigopts...]
    t=$1 md=$2 label=$3; shift 3
    if OPENSSL_CONF=openssl.cnf openssl dgst "-$md" "$@" -sign "$(uri "$t" private)" -out "sig.$label" msg 2>err &&
      openssl dgst "-$md" "$@" -verify "$t.pub.pem" -signature "sig.$label" msg >/dev/null; then
      pass "openssl + pkcs11-provider: $label"
    else
      fail "openssl + pkcs11-provider: $label ($(tail -n 2 err | tr '\n' ' '))"
    fi
  }
  ossl_sign rsa sha256 "RSA PKCS#1 SHA-256"
  ossl_sign rsa sha512 "RSA PSS SHA-512" -sigopt rsa_padding_mode:pss -sigopt rsa_pss_saltlen:digest
  ossl_sign p256 sha256 "ECDSA P-256"
  ossl_sign p384 sha384 "ECDSA P-384"
  ossl_sign p521 sha512 "ECDSA P-521"
else
  echo "skip pkcs11-provider (not installed)"
fi

if command -v osslsigncode >/dev/null && [ -f "$engine" ] && command -v x86_64-w64-mingw32-gcc >/dev/null; then
  ran=1
  printf 'int main(void){return 0;}\n' >hello.c
  x86_64-w64-mingw32-gcc -o hello.exe hello.c
  pkcs11-tool --module "$module" --slot-index 0 --read-object --type cert --label "signbridge test CA" -o ca.der \
    >/dev/null 2>&1 && openssl x509 -inform DER -in ca.der -out ca.pem
  if osslsigncode sign -pkcs11engine "$engine" -pkcs11module "$module" -h sha256 \
      -pkcs11cert 'pkcs11:token=fake%20rsa;type=cert;object=rsa%20key' -key 'pkcs11:token=fake%20rsa;type=private' \
      -in hello.exe -out signed.exe >err 2>&1 &&
    osslsigncode verify -CAfile ca.pem -in signed.exe 2>&1 | grep -q 'Signature verification: ok'; then
    pass "osslsigncode + libp11 engine: Authenticode RSA, chain verified"
  else
    fail "osslsigncode + libp11 engine ($(tail -n 3 err | tr '\n' ' '))"
  fi
else
  echo "skip osslsigncode (osslsigncode, libengine-pkcs11-openssl or mingw missing)"
fi

if command -v jarsigner >/dev/null && command -v jar >/dev/null; then
  ran=1
  echo x >a.txt
  jsign() { # slot alias label
    printf 'name = signbridge%s\nlibrary = %s\nslotListIndex = %s\n' "$1" "$module" "$1" >"p11-$1.cfg"
    jar cf "t$1.jar" a.txt
    if jarsigner -keystore NONE -storetype PKCS11 -providerClass sun.security.pkcs11.SunPKCS11 \
        -providerArg "p11-$1.cfg" -storepass 1234 "t$1.jar" "$2" >err 2>&1 &&
      jarsigner -verify "t$1.jar" 2>&1 | grep -q 'jar verified' &&
      [ "$(unzip -p "t$1.jar" 'META-INF/*.RSA' 'META-INF/*.EC' 2>/dev/null | openssl pkcs7 -inform DER -print_certs |
        grep -c '^subject')" = 2 ]; then
      pass "jarsigner + SunPKCS11: $3 (leaf and CA certificate from the token)"
    else
      fail "jarsigner + SunPKCS11: $3 ($(tail -n 3 err | tr '\n' ' '))"
    fi
  }
  jsign 0 "rsa key" "RSA"
  jsign 2 "p384 key" "ECDSA P-384"
else
  echo "skip jarsigner (no JDK)"
fi

[ "$status" -eq 0 ] || { echo "--- module log"; tail -n 40 module.log 2>/dev/null; }
[ "$ran" -eq 1 ] || exit 77
exit "$status"
