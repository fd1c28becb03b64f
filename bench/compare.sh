#!/usr/bin/env bash
# xdit against PyTorch + diffusers on the same work, in one invocation:
#   the PixArt-alpha XL/2 step with CFG at 512 and 1024 px, the VAE decoder to
#   1024 px, the T5-XXL encoder on 120 tokens (t5prompt: a 20-token PixArt
#   prompt and "" under CFG, as each pipeline encodes them), a FLUX.1 forward at full
#   width and 2 + 4 blocks at 1024 px, an SD3.5-large step with CFG at full
#   width and 3 blocks at 1024 px; bf16 (or --dtype f32), the same number of
#   threads, warm-up runs first, the best timed run of each side.
# Prints both times and xdit's speed-up (torch seconds / xdit seconds), with
# the CPU model and the ISA oneDNN runs on.
#
#   bench/compare.sh [--threads N] [--warmup N] [--repeat N] [--rounds N] [--rows LIST] [--device D]
#                    [--dtype bf16|f32] [--isa AVX2|AVX512_CORE]
#
# --isa caps both sides at a smaller server's instruction set on this CPU:
# ONEDNN_MAX_CPU_ISA for oneDNN (xdit's own kernels follow it too), and for
# PyTorch also ATEN_CPU_CAPABILITY and MKL_ENABLE_INSTRUCTIONS. Below
# AVX-512-bf16 xdit computes bf16 work in f32; --dtype f32 is then the fair
# setting for both.
#
# --rounds N runs each row's pair N times, xdit and PyTorch alternated, and
# keeps each side's best: on a shared host whose speed changes every few
# seconds, one pair can land on two different states (default 1).
# LIST is a comma-separated subset of pixart512,pixart1024,vae1024,t5,t5prompt,flux1024,sd3_1024,
# flux1024_q8_0,flux1024_int8,wan480,wan_vae480,qwen7b200,zimage1024 (default: all but the Wan rows, which
# take minutes each on a few cores: a Wan2.1-1.3B step with CFG at full width and 3 blocks on a
# 480 x 832 clip of 9 frames, and AutoencoderKLWan decoding those 3 latent frames; and
# qwen7b200: Qwen-Image's text encoder, Qwen2.5-VL-7B's language model at full width and 4 of
# its 28 layers, on a 200-token prompt; zimage1024: the Z-Image-Turbo transformer at full width,
# 1 + 1 refiner blocks and 3 of its 30 layers, on a 1024 px image and a 128-token caption). The quantized rows (issue 45): xdit keeping the FLUX
# blocks' weights in Q8_0 blocks against diffusers running the same Q8_0 blocks through its GGUF
# layers; xdit's --weights_dtype int8 against PyTorch's bf16 forward (no int8 path in diffusers). --device cuda (or cuda:N) runs both sides on the GPU: the
# pixart and flux rows only (default pixart1024,flux1024), each xdit row
# with its model FLOP utilisation against the cuBLASLt peak of the same run. The Python side lives in a venv (default bench/.venv,
# or $XDIT_BENCH_VENV) made from bench/requirements.txt when it is missing.
# The xdit binary is $XDIT, or build/xdit.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
xdit="${XDIT:-$root/build/xdit}"
venv="${XDIT_BENCH_VENV:-$root/bench/.venv}"
threads="$(nproc)"
warmup=1
repeat=1
rounds=1
rows=""
device=cpu
dtype=bf16
isa=""

usage() { sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads="${2:?--threads needs a number}"; shift 2 ;;
    --warmup) warmup="${2:?--warmup needs a number}"; shift 2 ;;
    --repeat) repeat="${2:?--repeat needs a number}"; shift 2 ;;
    --rounds) rounds="${2:?--rounds needs a number}"; shift 2 ;;
    --rows) rows="${2:?--rows needs a list}"; shift 2 ;;
    --device) device="${2:?--device needs cpu, cuda or cuda:N}"; shift 2 ;;
    --dtype) dtype="${2:?--dtype needs bf16 or f32}"; shift 2 ;;
    --isa) isa="${2:?--isa needs AVX2 or AVX512_CORE}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "compare.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for n in "$threads" "$warmup" "$repeat" "$rounds"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "compare.sh: '$n' is not a whole number" >&2; exit 2; }
done
(( rounds >= 1 )) || { echo "compare.sh: --rounds must be at least 1" >&2; exit 2; }
[[ "$dtype" == bf16 || "$dtype" == f32 ]] || { echo "compare.sh: --dtype must be bf16 or f32, not '$dtype'" >&2; exit 2; }
case "$isa" in
  "") ;;
  AVX2) export ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ;;
  AVX512_CORE) export ONEDNN_MAX_CPU_ISA=AVX512_CORE ATEN_CPU_CAPABILITY=avx512 MKL_ENABLE_INSTRUCTIONS=AVX512 ;;
  *) echo "compare.sh: --isa must be AVX2 or AVX512_CORE, not '$isa'" >&2; exit 2 ;;
esac
[[ -z "$isa" || "$device" == cpu ]] || { echo "compare.sh: --isa applies to --device cpu" >&2; exit 2; }
if [[ "$device" == cpu ]]; then
  rows="${rows:-pixart512,pixart1024,vae1024,t5,t5prompt,flux1024,sd3_1024,flux1024_q8_0,flux1024_int8}"
else
  rows="${rows:-pixart1024,flux1024}"
fi
torch_device="${device%%:*}"  # PyTorch's current device: CUDA_VISIBLE_DEVICES picks another
[[ -x "$xdit" ]] || { echo "compare.sh: no xdit binary at $xdit (build it: bash scripts/build.sh, or set XDIT)" >&2; exit 1; }

if ! "$venv/bin/python" -c 'import torch, diffusers, transformers' 2>/dev/null; then
  echo "compare.sh: installing PyTorch + diffusers into $venv (once; several GB)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$root/bench/requirements.txt"
fi

# One row of each side: prints "seconds" (xdit: "seconds isa") or fails.
xdit_row() {  # WHAT RES [NAME: the row of that name, when the benchmark prints several] [WEIGHTS]
  "$xdit" bench "$1" --resolutions "$2" --dtypes "$dtype" --threads "$threads" --warmup "$warmup" \
    --repeat "$repeat" --device "$device" ${4:+--weights "$4"} --json |
    "$venv/bin/python" -c 'import json,sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
r = next(r for r in rows if sys.argv[1] in ("", r["name"]))
print(r["seconds"], r["ratio"], r["isa"])' "${3:-}"
}
torch_row() {  # ROW
  "$venv/bin/python" "$root/bench/torch_bench.py" "$1" --threads "$threads" --warmup "$warmup" \
    --repeat "$repeat" --device "$torch_device" --dtype "$dtype" | "$venv/bin/python" -c 'import json,sys; print(json.loads(sys.stdin.readline())["seconds"])'
}

cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
if [[ "$device" != cpu ]]; then
  cpu="$cpu; GPU: $("$venv/bin/python" -c 'import torch; print(torch.cuda.get_device_name())')"
fi
versions="$("$venv/bin/python" -c 'import torch, diffusers; print(f"torch {torch.__version__}, diffusers {diffusers.__version__}")')"
torch_isa="$("$venv/bin/python" -c 'import torch; print(torch.backends.cpu.get_cpu_capability())')"
echo "CPU: $cpu; $threads threads; $dtype; $versions (ATen $torch_isa)${isa:+; capped at $isa}"
printf '%-32s %10s %10s %9s\n' work 'xdit s' 'torch s' speed-up
IFS=',' read -ra list <<< "$rows"
for row in "${list[@]}"; do
  case "$row" in
    pixart512) label="PixArt-alpha step, CFG, 512 px"; x=(transformer 512); t="pixart:512" ;;
    pixart1024) label="PixArt-alpha step, CFG, 1024 px"; x=(transformer 1024); t="pixart:1024" ;;
    vae1024) label="VAE decoder, 1024 px"; x=(vae 1024); t="vae:1024" ;;
    t5) label="T5-XXL encoder, 120 tokens"; x=(t5 512 t5_xxl_encoder); t="t5" ;;
    t5prompt) label="PixArt prompt (20 tok) + negative"; x=(t5 512 t5_xxl_pixart_cfg); t="t5:20" ;;
    flux1024) label="FLUX.1 2+4 blocks, 1024 px"; x=(flux 1024); t="flux:1024" ;;
    sd3_1024) label="SD3.5-large 3 blocks, CFG, 1024"; x=(sd3 1024); t="sd3:1024" ;;
    flux1024_q8_0) label="FLUX.1 2+4, 1024, Q8_0 both"; x=(flux 1024 flux_2+4_blocks_q8_0 q8_0); t="flux_q8_0:1024" ;;
    flux1024_int8) label="FLUX.1 2+4, 1024, int8 v bf16"; x=(flux 1024 flux_2+4_blocks_int8 int8); t="flux:1024" ;;
    wan480) label="Wan2.1-1.3B 3 blocks, 480p x 9 fr"; x=(wan 480); t="wan:480" ;;
    wan_vae480) label="Wan VAE decode, 480p x 9 frames"; x=(wan_vae 480); t="wan_vae:480" ;;
    qwen7b200) label="Qwen2.5-VL-7B text, 4 layers, 200 tok"; x=(qwen_text 200); t="qwen_text:200" ;;
    zimage1024) label="Z-Image 1+1+3 blocks, 1024 px"; x=(zimage 1024); t="zimage:1024" ;;
    *) echo "compare.sh: unknown row '$row' (pixart512, pixart1024, vae1024, t5, t5prompt, flux1024, sd3_1024, flux1024_q8_0, flux1024_int8, wan480, wan_vae480, qwen7b200, zimage1024)" >&2; exit 2 ;;
  esac
  xs="" ts=""
  for ((i = 0; i < rounds; i++)); do
    read -r x1 r1 isa < <(xdit_row "${x[@]}")
    t1="$(torch_row "$t")"
    if [[ -z "$xs" ]] || awk -v a="$x1" -v b="$xs" 'BEGIN { exit !(a < b) }'; then
      xs="$x1" ratio="$r1"
    fi
    if [[ -z "$ts" ]] || awk -v a="$t1" -v b="$ts" 'BEGIN { exit !(a < b) }'; then ts="$t1"; fi
  done
  awk -v l="$label" -v x="$xs" -v t="$ts" -v i="$isa" -v r="$ratio" -v d="$device" \
    'BEGIN { printf "%-32s %10.3f %10.3f %8.2fx  (%s %s, %.2f of the GEMM peak)\n", l, x, t, t / x,
             d == "cpu" ? "oneDNN ISA" : "on", i, r }'
done
