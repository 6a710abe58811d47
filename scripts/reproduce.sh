#!/usr/bin/env bash
# Run every study of the paper reproduction in order, at one scale, into one root workdir.
#
#   scripts/reproduce.sh [tiny|medium|full] [ROOT] [STUDY ...] [--status]
#
#   tiny (default): the CPU scale of every config (`configs/<name>.py:tiny`), minutes per study.
#   medium:         the main table at `configs/main_table.py:medium`, one sweep per task into
#                   ROOT/main_table/<task>, its V-shape (pointwise_vs_distributional) read from
#                   those parts, and Table 3 (`configs/ood_prior_range.py:medium`): hours per
#                   sweep on a 2-core CPU, resumable.
#   full:           the published scale (128 x 128, published sampler profiles and case counts,
#                   full-size networks): for accelerators (see README, "Running on a GPU / TPU pod").
#   ROOT:           root workdir (default ./reproduce-<scale>); each study writes ROOT/<study>[/<variant>].
#   STUDY ...:      run only these studies (default all, in order: `python -m experiments.reproduce --help`).
#                   A labelled variant runs only when named, at its own scale whatever SCALE says:
#                   guidance_calibration_medium_oracle (`configs/guidance_calibration.py:medium_oracle`),
#                   noise_levels_medium_oracle (`configs/noise_levels.py:medium_oracle`).
#   --status:       run nothing; list every step's workdir and state (done, partial n/N records,
#                   not started, waiting for another step) and how many steps are left.
#
# The steps are `experiments.reproduce.steps`: sweeps (one per noise level for guidance_calibration
# and noise_levels), reference builds, the synthetic calibration study and the study reports
# (`experiments.studies`: the V-shape from ROOT/main_table's records, the optima per noise level,
# Tables 3 and 4). Rerunning the same command skips every finished step and resumes a sweep from
# its workdir. Extra sweep flags (e.g. "--config.num_cases=10") can be passed in SWEEP_FLAGS.
set -euo pipefail

STATUS=()
ARGS=()
for a in "$@"; do
  if [ "$a" = "--status" ]; then STATUS=(--status); else ARGS+=("$a"); fi
done
set -- "${ARGS[@]+"${ARGS[@]}"}"
SCALE="${1:-tiny}"
ROOT="${2:-./reproduce-${SCALE}}"
shift $(( $# > 2 ? 2 : $# )) || true
STUDIES=$(IFS=,; echo "$*")

cd "$(dirname "$0")/.."
export PYTHONPATH="${PWD}${PYTHONPATH:+:$PYTHONPATH}"
exec python -m experiments.reproduce --scale="$SCALE" --root="$ROOT" --studies="$STUDIES" "${STATUS[@]+"${STATUS[@]}"}"
