#!/bin/sh
# Runs one libFuzzer binary for a while on a scratch copy of the committed
# corpus, seeded also with every past finding. Usage:
#   run_libfuzzer.sh FUZZER SECONDS WORK_DIR FINDINGS_PREFIX SEED_DIR...
# A finding (crash, sanitizer report, leak, an input above 512 MB of
# allocation) makes the fuzzer exit non-zero and is written to
# FINDINGS_PREFIX*; fix it, then commit the input to tests/fuzz/crashes/.
set -eu
fuzzer=$1 seconds=$2 work=$3 findings=$4
shift 4
rm -rf "$work"
mkdir -p "$work" "$(dirname "$findings")"
seeds=""
for d in "$@"; do [ -d "$d" ] && seeds="$seeds $d"; done
# shellcheck disable=SC2086
exec "$fuzzer" -max_total_time="$seconds" -rss_limit_mb=1024 -malloc_limit_mb=512 \
  -print_final_stats=1 -artifact_prefix="$findings" "$work" $seeds
