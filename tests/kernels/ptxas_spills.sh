#!/bin/sh
# Compiles CUDA sources for sm_90a with ptxas' resource report and fails when
# any kernel spills registers (the issue's "no register spills in the hot
# kernels"), or when the report is missing (nothing was checked).
# usage: ptxas_spills.sh NVCC INCLUDE_DIR FILE.cu...
nvcc="$1"; inc="$2"; shift 2
status=0
for f in "$@"; do
  log=$("$nvcc" -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Xptxas -v -I"$inc" -c "$f" -o /dev/null 2>&1) || { echo "$log"; exit 1; }
  kernels=$(echo "$log" | grep -c "bytes spill stores")
  if [ "$kernels" -eq 0 ]; then echo "$f: no ptxas report"; echo "$log"; exit 1; fi
  if echo "$log" | grep -E "[1-9][0-9]* bytes spill (stores|loads)"; then
    echo "$f: register spills (above)"; status=1
  else
    echo "$f: $kernels kernels, no spills"
  fi
done
exit $status
