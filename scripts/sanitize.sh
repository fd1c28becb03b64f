#!/usr/bin/env bash
# Builds xdit with AddressSanitizer + UndefinedBehaviorSanitizer into
# build-asan/ and runs the whole test suite under them (the MPI tests too).
# OpenMPI's own leaks at init/finalize are suppressed by
# tests/sanitizers/lsan.supp; any other report fails the run. Before the
# suite, the HTTP request fuzzer runs 10^6 inputs (libFuzzer, clang).
#   bash scripts/sanitize.sh [ctest arguments, e.g. -L e2e]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bash scripts/install_deps.sh
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXDIT_SANITIZE=ON \
  -DXDIT_FUZZ=OFF >/dev/null
cmake --build build-asan -j"$(nproc)"
# Full unwinding, so that leaks inside OpenMPI (its plugins have no frame
# pointers) show the frames the suppressions match.
export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0"
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# xdit serve's request reading (HTTP parser, limits, head checks, the JSON
# request schema) under libFuzzer with ASan + UBSan: 10^6 runs from the
# committed corpus and past findings (tests/fuzz/README.md).
if command -v clang++ >/dev/null; then
  cmake -S tests/fuzz/libfuzzer -B build-asan/libfuzzer -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build-asan/libfuzzer --target fuzz_http
  mkdir -p build-asan/libfuzzer/findings
  rm -rf build-asan/libfuzzer/work_http && mkdir -p build-asan/libfuzzer/work_http
  build-asan/libfuzzer/fuzz_http -runs=1000000 -rss_limit_mb=1024 -malloc_limit_mb=512 \
    -print_final_stats=1 -artifact_prefix=build-asan/libfuzzer/findings/http- \
    build-asan/libfuzzer/work_http tests/fuzz/corpus/http tests/fuzz/crashes/http
else
  echo "no clang++: the HTTP fuzzer is skipped (apt-get install clang libclang-rt-dev)" >&2
fi
cd build-asan && ctest --output-on-failure -j"$(nproc)" --timeout 1200 "$@"
