#!/usr/bin/env bash
# Installs the Debian packages xdit needs to build and test. Safe to run again.
set -euo pipefail
pkgs=(cmake ninja-build g++
      python3 python3-pip    # fetches oneDNN 3 (below) when the system has none
      nlohmann-json3-dev     # config.json, safetensors headers, HTTP bodies
      libboost-dev           # xdit serve's HTTP server (Boost.Beast on Asio, header-only)
      libcpp-httplib-dev pkg-config  # the HTTP client of the tests and bench serve
      libcli11-dev           # command line
      libsentencepiece-dev   # T5 tokenizer (spiece.model)
      libicu-dev             # CLIP tokenizer: NFC, lower-casing, Unicode regex classes
      libspng-dev            # PNG output with text chunks
      libavformat-dev libavcodec-dev libavutil-dev libswscale-dev  # MP4 output (H.264)
      ffmpeg                 # ffprobe: the tests open the MP4s with FFmpeg's own tools
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

# oneDNN >= 3 (matmul, convolution and reorder primitives; AMX / AVX-512-bf16
# kernels). Debian's libdnnl-dev is 2.x, whose bf16 NHWC convolutions fall
# back to a scalar reference kernel; a system oneDNN 3 is used when present,
# otherwise the GNU-OpenMP CPU build from PyPI (onednn-cpu-gomp and
# onednn-devel-cpu-gomp 2023.2.0 = oneDNN 3.2: libdnnl.so.3 and headers) is
# unpacked into .deps/onednn. Nothing of Python is needed at run time: the
# binary finds the library through its rpath.
root="$(cd "$(dirname "$0")/.." && pwd)"

# unpack_wheels SRC DST MODE: the files of every wheel in SRC into DST.
# MODE data: <dist>.data/data/{include,lib,share}/... -> DST/{include,lib,share}/...
# MODE include: include/... -> DST/include/...
unpack_wheels() {
  python3 - "$1" "$2" "$3" <<'PY'
import glob, os, sys, zipfile
src, dst, mode = sys.argv[1], sys.argv[2], sys.argv[3]
for whl in glob.glob(os.path.join(src, "*.whl")):
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            parts = name.split("/")
            if name.endswith("/"):
                continue
            if mode == "data" and len(parts) > 3 and parts[0].endswith(".data") and parts[1] == "data":
                out = os.path.join(dst, *parts[2:])
            elif mode == "include" and parts[0] == "include":
                out = os.path.join(dst, name)
            else:
                continue
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(name) as f, open(out, "wb") as g:
                g.write(f.read())
PY
}

prefix="$root/.deps/onednn"
system_major=$(sed -n 's/^#define DNNL_VERSION_MAJOR \([0-9]*\).*/\1/p' \
  /usr/include/oneapi/dnnl/dnnl_version.h 2>/dev/null || true)
if [ "${system_major:-0}" -lt 3 ] && [ ! -f "$prefix/lib/libdnnl.so.3" ]; then
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" \
    onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0
  rm -rf "$prefix.partial" && mkdir -p "$prefix.partial"
  unpack_wheels "$tmp" "$prefix.partial" data
  rm -rf "$prefix" && mv "$prefix.partial" "$prefix"
  rm -rf "$tmp"
fi

# The cuDNN frontend (header-only C++ graph API: fused attention through
# cuDNN) for the CUDA backend, when the CUDA toolkit is there: the include/
# folder of PyPI's nvidia-cudnn-frontend wheel, unpacked into
# .deps/cudnn_frontend (the wheel's Python part is not used).
fe_prefix="$root/.deps/cudnn_frontend"
if { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; } &&
   [ ! -f "$fe_prefix/include/cudnn_frontend.h" ]; then
  tmp=$(mktemp -d)
  if python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
       --platform manylinux_2_28_x86_64 -d "$tmp" nvidia-cudnn-frontend==1.32.0; then
    rm -rf "$fe_prefix.partial" && mkdir -p "$fe_prefix.partial"
    unpack_wheels "$tmp" "$fe_prefix.partial" include
    rm -rf "$fe_prefix" && mv "$fe_prefix.partial" "$fe_prefix"
  else
    echo "install_deps: nvidia-cudnn-frontend not downloaded: the CUDA backend builds without cuDNN attention" >&2
  fi
  rm -rf "$tmp"
fi
