#!/usr/bin/env bash
# Builds xdit with AddressSanitizer + UndefinedBehaviorSanitizer into
# build-asan/ and runs the whole test suite under them (the MPI tests too).
# OpenMPI's own leaks at init/finalize are suppressed by
# tests/sanitizers/lsan.supp; any other report fails the run.
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
cd build-asan && ctest --output-on-failure -j"$(nproc)" --timeout 1200 "$@"
