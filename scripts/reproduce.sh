#!/usr/bin/env bash
# Run every study of the paper reproduction in order, at one scale, into one root workdir.
#
#   scripts/reproduce.sh [tiny|full] [ROOT] [STUDY ...]
#
#   tiny (default): the CPU scale of every config (`configs/<name>.py:tiny`), minutes per study.
#   full:           the published scale (128 x 128, published sampler profiles and case counts,
#                   full-size networks): for accelerators (see README, "Running on a GPU / TPU pod").
#   ROOT:           root workdir (default ./reproduce-<scale>); each study writes ROOT/<study>[/<variant>].
#   STUDY ...:      run only these studies (names below); default all, in this order.
#
# Every entry point resumes from its workdir (finished pools, references, networks and sweep
# records are kept), so rerunning the same command after an interruption continues where it
# stopped. Extra sweep flags (e.g. "--config.num_cases=10") can be passed in SWEEP_FLAGS.
set -euo pipefail

SCALE="${1:-tiny}"
ROOT="${2:-./reproduce-${SCALE}}"
shift $(( $# > 2 ? 2 : $# )) || true
STUDIES=("$@")
ALL=(quickstart reference_validation main_table guidance_calibration noise_levels resolution
     ood_prior_range pointwise_vs_distributional calibration_protocol model_comparison)
[ ${#STUDIES[@]} -eq 0 ] && STUDIES=("${ALL[@]}")

case "$SCALE" in
  tiny) ARG=":tiny"; TINY=True ;;
  full) ARG=""; TINY=False ;;
  *) echo "scale: expected 'tiny' or 'full', got '$SCALE'" >&2; exit 2 ;;
esac
for s in "${STUDIES[@]}"; do
  [[ " ${ALL[*]} " == *" $s "* ]] || { echo "study: unknown '$s'; expected one of: ${ALL[*]}" >&2; exit 2; }
done

cd "$(dirname "$0")/.."
export PYTHONPATH="${PWD}${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$ROOT"
read -r -a FLAGS <<< "${SWEEP_FLAGS:-}"

sweep() {  # sweep CONFIG WORKDIR [flags...]
  local config="$1" workdir="$2"; shift 2
  echo "=== $(date -u +%H:%M:%S) sweep ${config} -> ${workdir}"
  local start=$SECONDS
  python -m experiments.sweep --config="configs/${config}.py${ARG}" --workdir="$workdir" "$@" "${FLAGS[@]}"
  echo "=== ${config}: $(( SECONDS - start )) s" | tee -a "$ROOT/timings.txt"
}

grid() {  # grid MODULE FUNCTION: the values of a study grid at this scale
  python -c "from configs import $1 as m; print(' '.join(repr(v) for v in m.$2($TINY)))"
}

for study in "${STUDIES[@]}"; do
  case "$study" in
    quickstart)
      # the quickstart has one (CPU) scale
      echo "=== $(date -u +%H:%M:%S) quickstart -> $ROOT/quickstart"
      python -m experiments.sweep --config=configs/quickstart.py --workdir="$ROOT/quickstart" "${FLAGS[@]}"
      ;;
    reference_validation)
      echo "=== $(date -u +%H:%M:%S) reference validation (GT1/GT2) -> $ROOT/reference_validation"
      for task in darcy poisson; do
        python -m experiments.reference --config="configs/reference_validation.py${ARG}" \
          --config.task="$task" --workdir="$ROOT/reference_validation/$task"
      done
      ;;
    guidance_calibration)
      for eps in $(grid guidance_calibration thresholds); do
        sweep guidance_calibration "$ROOT/guidance_calibration/eps=$eps" --config.noise_threshold="$eps"
      done
      ;;
    noise_levels)
      for sigma in $(grid noise_levels noise_levels); do
        sweep noise_levels "$ROOT/noise_levels/noise=$sigma" --config.noise_std="$sigma"
      done
      ;;
    calibration_protocol)
      sweep calibration_protocol "$ROOT/calibration_protocol"
      python -m experiments.calibration_study --config="configs/calibration_protocol.py${ARG}" \
        --workdir="$ROOT/calibration_protocol/synthetic"
      ;;
    *)
      sweep "$study" "$ROOT/$study"
      ;;
  esac
done
echo "done: $ROOT (per-study summaries in $ROOT/*/summary.md, timings in $ROOT/timings.txt)"
