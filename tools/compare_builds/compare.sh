#!/usr/bin/env bash
# Compares two xdit builds' final latents on every tiny model and ten
# parallel layouts (serial, CFG, Ulysses, Ring, USP, PipeFusion, PipeFusion x
# Ring, DistriFusion, naive patch, tensor parallel, data parallel), f32 (and
# bf16 with DTYPES="f32 bf16"), three steps, a non-square size. Prints one line per case: "same" when the
# two safetensors files are byte-identical, else the largest relative
# difference. Exit status 1 when any case differs by more than 1e-6.
#
#   tools/compare_builds/compare.sh OLD_XDIT NEW_XDIT [OUT_DIR]
set -euo pipefail
old=$1
new=$2
out=${3:-$(mktemp -d)}
mkdir -p "$out"
root="$(cd "$(dirname "$0")/../.." && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 XDIT_QUIET=1
mpi=(mpirun --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
# name|ranks|flags
layouts=(
  "serial|1|"
  "cfg|2|--use_cfg_parallel"
  "ulysses2|2|--ulysses_degree 2"
  "ring2|2|--ring_degree 2"
  "usp2x2|4|--ulysses_degree 2 --ring_degree 2"
  "pipefusion2|2|--pipefusion_parallel_degree 2 --num_pipeline_patch 2"
  "pipefusion2xring2|4|--pipefusion_parallel_degree 2 --ring_degree 2"
  "distrifusion2|2|--patch_parallel_degree 2"
  "naive2|2|--patch_parallel_degree 2 --patch_mode naive"
  "tp2|2|--tensor_parallel_degree 2"
  "dp2|2|--data_parallel_degree 2"
)
# MODELS (default: every tiny model) and DTYPES (default: f32) choose the cases.
read -r -a models <<<"${MODELS:-pixart-alpha-tiny pixart-sigma-tiny flux-schnell-tiny flux-dev-tiny sd3-tiny sd35-tiny wan21-tiny wan22-tiny wan22-ti2v-tiny zimage-tiny qwen-image-tiny}"
read -r -a dtypes <<<"${DTYPES:-f32}"
worst=0
for m in "${models[@]}"; do
  # Each family's guidance exercised: CFG, true CFG (FLUX.1 [dev], Qwen-Image's
  # renorm), SD3.5's skip-layer guidance, Z-Image's truncation and
  # normalization, Wan2.2's second expert's scale.
  case $m in
    pixart*) size=(--height 160 --width 96 --guidance_scale 4.5) ;;
    flux-dev*) size=(--height 80 --width 48 --negative_prompt "blur" --true_cfg_scale 2.5) ;;
    flux*) size=(--height 80 --width 48) ;;
    sd35*) size=(--height 80 --width 48 --guidance_scale 5 --skip_guidance_layers 1 --skip_layer_guidance_start 0) ;;
    sd3*) size=(--height 80 --width 48 --guidance_scale 5) ;;
    wan22-ti2v*) size=(--height 64 --width 96 --num_frames 5 --guidance_scale 4) ;;
    wan22*) size=(--height 48 --width 80 --num_frames 5 --guidance_scale 4 --guidance_scale_2 2.5) ;;
    wan*) size=(--height 48 --width 80 --num_frames 5 --guidance_scale 4) ;;
    zimage*) size=(--height 96 --width 64 --guidance_scale 1.5 --negative_prompt "blur" --cfg_truncation 0.6 --cfg_normalization 1.02) ;;
    qwen-image*) size=(--height 96 --width 64 --negative_prompt "blur" --true_cfg_scale 3) ;;
  esac
  for dt in "${dtypes[@]}"; do
  for l in "${layouts[@]}"; do
    IFS='|' read -r name ranks flags <<<"$l"
    [ "$dt" = f32 ] || name="$name.$dt"
    # shellcheck disable=SC2206
    f=($flags)
    for b in old new; do
      bin=$old
      [ $b = new ] && bin=$new
      cmd=("$bin" generate --model "$root/models/$m" --prompt "a red fox" --prompt "two cats"
           --num_inference_steps 3 --dtype "$dt" --output_type latent
           -o "$out/$m.$name.$b.safetensors" "${size[@]}" "${f[@]}")
      if [ "$ranks" = 1 ]; then "${cmd[@]}" >/dev/null 2>"$out/$m.$name.$b.log" || true
      else "${mpi[@]}" -np "$ranks" "${cmd[@]}" >/dev/null 2>"$out/$m.$name.$b.log" || true; fi
    done
    a="$out/$m.$name.old.safetensors" c="$out/$m.$name.new.safetensors"
    if [ ! -f "$a" ] || [ ! -f "$c" ]; then
      if [ ! -f "$a" ] && [ ! -f "$c" ]; then
        why=$(grep -m1 -o 'xdit: error: .*' "$out/$m.$name.new.log" || true)
        printf '%-18s %-18s refused by both: %s\n' "$m" "$name" "${why:-see $out/$m.$name.new.log}"
      else
        printf '%-18s %-18s ONE BUILD FAILED\n' "$m" "$name"; worst=1
      fi
      continue
    fi
    if cmp -s "$a" "$c"; then
      printf '%-18s %-18s same\n' "$m" "$name"
    else
      d=$(python3 "$root/tools/compare_builds/max_rel_diff.py" "$a" "$c")
      printf '%-18s %-18s max relative difference %s\n' "$m" "$name" "$d"
      python3 -c "import sys; sys.exit(0 if float('$d') <= 1e-6 else 1)" || worst=1
    fi
  done
  done
done
exit $worst
