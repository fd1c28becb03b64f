#!/usr/bin/env bash
# The CUDA backend's check on a GPU machine: its tests, then its benchmark
# against diffusers + PyTorch on the same GPU.
#
#   scripts/gpu_check.sh bundle   # on a build machine (network, CUDA toolkit, no GPU needed)
#   scripts/gpu_check.sh run      # on the GPU machine, in the same checkout
#   GPU_CHECK_SECONDS=420 scripts/gpu_check.sh run   # every check inside 420 s
#
# GPU machines lent to this project reach no package registry and lack the
# Debian libraries xdit builds against, so `bundle` does what a bare GPU
# machine cannot: it builds xdit with the CUDA backend (scripts/build.sh),
# and packs into .gpu/ (git-ignored) the stripped `xdit` and
# `test_cuda_ops`, every shared library they load that is neither glibc's,
# the driver's nor one of CUDA's (oneDNN, ICU, OpenMPI, SentencePiece, ...),
# OpenMPI's mpirun with its components (relocated: OPAL_PREFIX), and the
# wheels of the Python side the GPU image lacks (diffusers). `run` unpacks
# that, finds CUDA's libraries there (the toolkit's, or the nvidia-* wheels
# beside PyTorch), runs test_cuda_ops (every op against the CPU op, the tiny
# PixArt and FLUX transformers against the CPU and diffusers, the whole
# pipelines' images), test_device_comm and test_parallel's GPU cases under
# mpirun with 2 and 4 ranks (the parallel methods on GPU memory against the
# serial run), then the GPU rows of `xdit bench` and bench/torch_bench.py:
# the PixArt-α step with CFG at 1024 px and the FLUX.1 forward at 1024 px
# (2 + 4 blocks, extrapolated to 19 + 38), both against the cuBLASLt GEMM
# peak measured in the same run. Results go to stdout and, when $OUT is set
# (the device tool), to $OUT/gpu_check.log.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
gpu="$root/.gpu"
cd "$root"

bundle() {
  command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] ||
    { echo "gpu_check.sh bundle: no nvcc here: the CUDA backend would not be built" >&2; exit 1; }
  bash scripts/build.sh
  [ -x build/tests/test_cuda_ops ] || { echo "gpu_check.sh bundle: build/tests/test_cuda_ops missing" >&2; exit 1; }
  rm -rf "$gpu" && mkdir -p "$gpu/stage/bin" "$gpu/stage/lib" "$gpu/stage/lib-compat" "$gpu/whl"
  strip --strip-debug -o "$gpu/stage/bin/xdit" build/xdit
  local t
  for t in test_cuda_ops test_parallel test_device_comm test_cli_mpi; do
    strip --strip-debug -o "$gpu/stage/bin/$t" "build/tests/$t"
  done
  # mpirun for the multi-rank GPU tests (ranks sharing the GPU through the
  # host-staged communicator): Debian's OpenMPI relocated under mpi/ (found
  # there through OPAL_PREFIX; its components in the same relative place),
  # its PMIx beside it (PMIX_INSTALL_PREFIX) and its help texts.
  local ml=/usr/lib/x86_64-linux-gnu m="$gpu/stage/mpi"
  mkdir -p "$m/bin" "$m/lib/x86_64-linux-gnu/openmpi" "$m/share"
  cp -L "$(readlink -f "$(command -v mpirun)")" "$m/bin/mpirun"
  cp -a "$ml/openmpi/lib" "$m/lib/x86_64-linux-gnu/openmpi/"
  cp -a "$ml/pmix2" "$m/lib/x86_64-linux-gnu/"
  rm -rf "$m/lib/x86_64-linux-gnu/pmix2/include" "$m/lib/x86_64-linux-gnu/openmpi/lib/pkgconfig"
  cp -a /usr/share/openmpi "$m/share/"
  [ -d /usr/share/pmix ] && cp -a /usr/share/pmix "$m/share/"
  # Shared libraries to carry: all but glibc's, the dynamic loader, the
  # driver's and CUDA's own (the GPU machine has those, matched to its
  # driver). Base libraries a system usually has (the C++ runtime, zlib,
  # OpenSSL, ...) go to lib-compat/, used only where the machine lacks them:
  # a newer system copy must win.
  ldd build/xdit build/tests/test_cuda_ops build/tests/test_parallel build/tests/test_cli_mpi "$m/bin/mpirun" \
    "$m"/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so "$m"/lib/x86_64-linux-gnu/pmix2/lib/pmix/*.so |
    awk '/=> \// { print $3 }' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux[^/]*)\.so' |
    grep -Ev '/lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nvrtc[a-z-]*|nvJitLink|nccl)\.so' |
    while read -r lib; do
      case "$(basename "$lib")" in
        libstdc++.so*|libgcc_s.so*|libgomp.so*|libz.so*|libssl.so*|libcrypto.so*|libudev.so*)
          cp -L "$lib" "$gpu/stage/lib-compat/" ;;
        *) cp -L "$lib" "$gpu/stage/lib/" ;;
      esac
    done
  # The Python side: diffusers (pure Python) is not on the GPU image.
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$gpu/whl" \
    "$(grep '^diffusers==' bench/requirements.txt)"
  # -9e: a window wide enough to share the binaries' common code.
  tar -C "$gpu/stage" -cf - . | xz -9e -T0 >"$gpu/bundle.tar.xz"
  rm -rf "$gpu/stage"
  du -sh "$gpu"/* | sed 's/^/gpu_check.sh bundle: /'
  echo "gpu_check.sh bundle: done; on the GPU machine run scripts/gpu_check.sh run (carry .gpu)"
}

# The folders holding CUDA's runtime libraries on this machine.
cuda_lib_dirs() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && echo "$d"
  done
  python3 - <<'PY' 2>/dev/null || true
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
for r in roots:
    for d in glob.glob(os.path.join(r, "nvidia", "*", "lib")):
        print(d)
PY
}

libs=""
status=0
# step SECONDS TITLE COMMAND...: one check with our libraries, bounded in
# time and by the whole run's GPU_CHECK_SECONDS (a lent machine's time is
# short); a failure, a timeout or a skip is recorded and the next check runs.
deadline=$((SECONDS + ${GPU_CHECK_SECONDS:-3600}))
step() {
  local limit="$1" title="$2" rc=0 left=$((deadline - SECONDS))
  shift 2
  if [ "$left" -lt 10 ]; then
    echo "== $title: skipped, GPU_CHECK_SECONDS spent"
    status=1
    return
  fi
  [ "$limit" -le "$left" ] || limit=$left
  echo "== $title"
  local t0=$SECONDS
  # Our binaries take our libraries; PyTorch (python3) keeps the system's.
  if [ "$1" = python3 ]; then
    timeout "$limit" "$@" || rc=$?
  else
    LD_LIBRARY_PATH="$libs" timeout "$limit" "$@" || rc=$?
  fi
  echo "== ($((SECONDS - t0)) s, exit $rc$([ "$rc" = 124 ] && echo ": timed out after $limit s"))"
  [ "$rc" = 0 ] || status=1
}

run() {
  [ -f "$gpu/bundle.tar.xz" ] || { echo "gpu_check.sh run: no .gpu/bundle.tar.xz (run 'scripts/gpu_check.sh bundle' on a build machine and carry .gpu)" >&2; exit 1; }
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  rm -rf "$gpu/run" && mkdir -p "$gpu/run"
  tar -C "$gpu/run" -xJf "$gpu/bundle.tar.xz"
  # Our binaries' library path (only theirs: PyTorch keeps the system's).
  libs="$gpu/run/lib:$(cuda_lib_dirs | paste -sd:)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local missing
  local bins=("$gpu"/run/bin/* "$gpu/run/mpi/bin/mpirun")
  missing="$(LD_LIBRARY_PATH="$libs" ldd "${bins[@]}" |
    awk '/not found/ { print $1 }' | sort -u)"
  if [ -n "$missing" ]; then  # base libraries this system lacks: the carried ones
    libs="$libs:$gpu/run/lib-compat"
    if LD_LIBRARY_PATH="$libs" ldd "${bins[@]}" | grep 'not found'; then
      echo "gpu_check.sh run: the libraries above are not found (searched $libs)" >&2
      exit 1
    fi
  fi
  local xdit="$gpu/run/bin/xdit"
  status=0
  # The tests' paths, fixed where they were built, point into this checkout.
  export XDIT_MODELS="$root/models" XDIT_TEST_DATA="$root/tests/data" XDIT_BINARY="$xdit" XDIT_QUIET=1
  local mpi="$gpu/run/mpi" n
  export OPAL_PREFIX="$mpi" PMIX_INSTALL_PREFIX="$mpi/lib/x86_64-linux-gnu/pmix2" \
    OMPI_MCA_mca_base_component_show_load_errors=0 \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 XDIT_MPIEXEC="$mpi/bin/mpirun"
  local mpirun=("$mpi/bin/mpirun" --oversubscribe --bind-to none)
  step 150 "test_cuda_ops (every CUDA op against the CPU op; tiny PixArt / FLUX / SD3 on the GPU)" \
    env OMP_NUM_THREADS="$(nproc)" "$gpu/run/bin/test_cuda_ops"
  # The parallel methods on GPU memory: 2 and 4 ranks, each on its local
  # rank's GPU (sharing it through the host-staged communicator where there
  # are fewer GPUs than ranks, NCCL otherwise), against the serial run.
  for n in 2 4; do
    step 90 "test_device_comm under mpirun -np $n" \
      env OMP_NUM_THREADS=2 "${mpirun[@]}" -np "$n" "$gpu/run/bin/test_device_comm"
    step 180 "test_parallel (GPU cases) under mpirun -np $n" \
      env OMP_NUM_THREADS=2 "${mpirun[@]}" -np "$n" "$gpu/run/bin/test_parallel" --gtest_filter='*OnGpu*'
  done
  step 180 "test_cli_mpi (xdit --device cuda under mpirun)" \
    "$gpu/run/bin/test_cli_mpi" --gtest_filter='*DeviceCuda*'
  step 120 "xdit bench transformer on the GPU (bf16, 1024 px; against cuBLASLt's peak in the same run)" \
    "$xdit" bench transformer --device cuda --resolutions 1024 --dtypes bf16 --warmup 2 --repeat 5
  step 120 "xdit bench flux on the GPU (bf16, 1024 px; against cuBLASLt's peak in the same run)" \
    "$xdit" bench flux --device cuda --resolutions 1024 --dtypes bf16 --warmup 2 --repeat 5
  if ls "$gpu"/whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$gpu/site" "$gpu"/whl/*.whl &&
      export PYTHONPATH="$gpu/site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  step 180 "diffusers + PyTorch eager on the same GPU" \
    python3 bench/torch_bench.py pixart:1024 flux:1024 --device cuda --threads "$(nproc)" \
    --warmup 2 --repeat 5
  # Where the FLUX forward's time goes: each kernel's duration (Nsight
  # Compute, the card's clocks as found), summed by kernel name.
  if [ -n "${OUT:-}" ] && command -v ncu >/dev/null; then
    step 240 "ncu: the FLUX.1 forward's kernels (to \$OUT/ncu_flux.csv)" \
      ncu --metrics gpu__time_duration.sum --clock-control none --cache-control none --csv \
      --log-file "$OUT/ncu_flux.csv" "$xdit" bench flux --device cuda --resolutions 1024 \
      --dtypes bf16 --warmup 0 --repeat 1
  fi
  step 300 "diffusers + PyTorch with torch.compile on the same GPU" \
    python3 bench/torch_bench.py pixart:1024 flux:1024 --device cuda --threads "$(nproc)" \
    --warmup 2 --repeat 5 --compile
  echo "gpu_check.sh run: exit status $status"
  return $status
}

case "${1:-}" in
  bundle) bundle ;;
  run)
    if [ -n "${OUT:-}" ]; then
      set -o pipefail
      run 2>&1 | tee "$OUT/gpu_check.log"
    else
      run
    fi
    ;;
  *) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
