#!/usr/bin/env bash
# Configures and builds xdit (Release with debug info) into build/: the
# targets given (scripts/run.sh: xdit alone, no tests), else everything.
# ccache is used when installed (CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
if [[ $# -gt 0 ]]; then
  cmake --build build -j"$(nproc)" --target "$@"
else
  cmake --build build -j"$(nproc)"
fi
