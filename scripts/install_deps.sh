#!/usr/bin/env bash
# Installs the Debian packages xdit needs to build and test. Safe to run again.
set -euo pipefail
pkgs=(cmake ninja-build g++
      libdnnl-dev            # oneDNN: matmul / reorder primitives (bf16 on AVX-512-bf16 / AMX)
      nlohmann-json3-dev     # config.json, safetensors headers
      libcli11-dev           # command line
      libsentencepiece-dev   # T5 tokenizer (spiece.model)
      libspng-dev            # PNG output with text chunks
      libopenmpi-dev openmpi-bin  # multi-process runtime (mpirun)
      libgtest-dev googletest
      clang libclang-rt-dev  # libFuzzer + sanitizers for the fuzz tests (tests/fuzz/libfuzzer)
      )
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
