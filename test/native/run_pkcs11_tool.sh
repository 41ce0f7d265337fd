#!/bin/sh
# pkcs11-tool's own conformance pass (--test --login) and a listing, against the fake daemon.
#   run_pkcs11_tool.sh FAKE_DAEMON MODULE
set -eu
fake=$1 module=$2
command -v pkcs11-tool >/dev/null || { echo "pkcs11-tool not installed (apt-get install opensc); skipping"; exit 77; }
dir=$(mktemp -d /tmp/sbp11-tool-XXXXXX)
"$fake" "$dir/daemon.sock" >"$dir/ready" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -s "$dir/ready" ] && break; sleep 0.1; done
[ -s "$dir/ready" ] || { echo "fake daemon did not start"; exit 1; }
export SIGNBRIDGE_SOCKET="$dir/daemon.sock" SIGNBRIDGE_LOG="$dir/module.log"
status=0
pkcs11-tool --module "$module" --list-slots || status=1
pkcs11-tool --module "$module" --list-objects --slot-index 0 || status=1
for slot in 0 1 2 3; do
  echo "=== pkcs11-tool --test --login, slot index $slot"
  out=$(pkcs11-tool --module "$module" --slot-index "$slot" --test --login --pin 1234 2>&1) || status=1
  printf '%s\n' "$out"
  case "$out" in *"errors"*) case "$out" in *"No errors"*) ;; *) status=1 ;; esac ;; esac
done
# Real signatures through pkcs11-tool, verified by openssl with the public key read from the token.
printf 'signed through pkcs11-tool\n' >"$dir/msg"
sign_verify() { # slot-index mechanism openssl-digest [extra openssl options] [input is the digest]
  slot=$1 mech=$2 md=$3 opts=$4 prehash=${5:-}
  in="$dir/msg"
  if [ -n "$prehash" ]; then openssl dgst "-$md" -binary "$dir/msg" >"$dir/digest"; in="$dir/digest"; fi
  # The key from the leaf certificate object (pkcs11-tool 0.23 cannot read P-384 public key objects, from any token).
  pkcs11-tool --module "$module" --slot-index "$slot" --read-object --type cert --id "$(id_of "$slot")" \
    -o "$dir/cert.der" >/dev/null 2>&1 || { echo "cannot read the certificate of slot $slot"; return 1; }
  openssl x509 -inform DER -in "$dir/cert.der" -pubkey -noout >"$dir/pub.pem" || return 1
  pkcs11-tool --module "$module" --slot-index "$slot" --login --pin 1234 --sign -m "$mech" \
    --signature-format openssl -i "$in" -o "$dir/sig" >/dev/null 2>&1 || { echo "FAIL sign $mech"; return 1; }
  # shellcheck disable=SC2086
  if openssl dgst "-$md" -verify "$dir/pub.pem" $opts -signature "$dir/sig" "$dir/msg" >/dev/null; then
    echo "ok   slot $slot $mech verified by openssl"
  else
    echo "FAIL slot $slot $mech: openssl does not verify"; return 1
  fi
}
id_of() { pkcs11-tool --module "$module" --slot-index "$1" --list-objects --type privkey 2>/dev/null | awk '/ID:/{print $2; exit}'; }
pss="-sigopt rsa_padding_mode:pss -sigopt rsa_pss_saltlen:digest"
sign_verify 0 SHA256-RSA-PKCS sha256 "" || status=1
sign_verify 0 SHA512-RSA-PKCS sha512 "" || status=1
sign_verify 0 SHA384-RSA-PKCS-PSS sha384 "$pss" || status=1
sign_verify 1 ECDSA-SHA256 sha256 "" || status=1
sign_verify 2 ECDSA sha384 "" prehash || status=1
sign_verify 3 ECDSA-SHA512 sha512 "" || status=1
[ "$status" -eq 0 ] || { echo "--- module log"; tail -n 60 "$dir/module.log" || true; }
exit "$status"
