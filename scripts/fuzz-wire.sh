#!/usr/bin/env bash
# Fuzzes the module's wire decoder (native/src/wire.c) with libFuzzer for a bounded time.
#   scripts/fuzz-wire.sh [SECONDS]     default 60; the corpus starts from the golden frames
# Needs clang (libFuzzer ships with it on Debian); installs it with apt when missing and running as root.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
out=build/fuzz-wire
log() { printf '[fuzz-wire] %s\n' "$*" >&2; }

# libFuzzer and the sanitizers' runtimes are in libclang-rt-dev, only a Recommends of clang on Debian 12.
fuzzer_runtime() { [ -f "$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)" ]; }
if ! command -v clang >/dev/null || ! fuzzer_runtime; then
  if [ "$(id -u)" -eq 0 ]; then
    log "installing clang and its runtimes (apt)"
    pkgs=(clang libclang-rt-dev)
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; }
  else
    log "clang or libFuzzer is missing: apt-get install clang libclang-rt-dev (as root), then run this again"; exit 1
  fi
fi

mkdir -p "$out/corpus" "$out/artifacts"
log "building the fuzz target"
clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Inative/src -Wall -Wextra -Werror native/src/wire.c test/native/fuzz_wire.c -o "$out/fuzz_wire"

# Seed the corpus with every golden frame (good and bad), as raw bytes.
for f in test/golden/wire/*.hex; do
  sed 's/#.*//' "$f" | tr -d ' \n\t\r' | xxd -r -p >"$out/corpus/$(basename "$f" .hex)" 2>/dev/null ||
    python3 -c 'import sys,re;sys.stdout.buffer.write(bytes.fromhex(re.sub(r"#.*","",open(sys.argv[1]).read()).replace(" ","").replace("\n","")))' "$f" >"$out/corpus/$(basename "$f" .hex)"
done

log "fuzzing for ${seconds}s"
"$out/fuzz_wire" -max_total_time="$seconds" -max_len=4096 -timeout=10 -print_final_stats=1 \
  -artifact_prefix="$out/artifacts/" "$out/corpus" 2>&1 | tail -n 25
log "no crash (corpus: $out/corpus)"
