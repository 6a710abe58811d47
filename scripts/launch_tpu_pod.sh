#!/usr/bin/env bash
# Run one sweep config on every host of a Cloud TPU pod slice (multi-host JAX).
#
#   scripts/launch_tpu_pod.sh [extra sweep flags, e.g. --config.num_cases=100]
#
# Each host installs the package and runs `python -m experiments.sweep --distributed ...`;
# `jax.distributed.initialize()` discovers the pod's hosts, the sweep axis is sharded over all
# chips of all hosts, every process writes the records its chips computed to
# WORKDIR/results.p<k>.jsonl and process 0 assembles results.jsonl, the tables and the figures.
# WORKDIR must therefore be one filesystem shared by all hosts (a Filestore/NFS mount, or a
# bucket mounted with gcsfuse at the same path on every host). Rerunning resumes.
# Set the variables below (or export them) before running; DRY_RUN=1 prints the command only.
set -euo pipefail

TPU_NAME="${TPU_NAME:-posteriorjax-pod}"          # an existing TPU VM pod slice, e.g. v5p-64
ZONE="${ZONE:-us-east5-a}"
PROJECT="${PROJECT:-$(gcloud config get-value project 2>/dev/null || true)}"
REPO="${REPO:?set REPO to the git URL this pod clones posteriorjax from}"
REVISION="${REVISION:-main}"                       # branch, tag or commit to run
CONFIG="${CONFIG:-configs/main_table.py}"          # any sweep config (":tiny" for a smoke test)
WORKDIR="${WORKDIR:-/mnt/shared/posteriorjax/main_table}"   # shared by all hosts
BUCKET="${BUCKET:-}"                               # optional: gcsfuse-mount this bucket at /mnt/shared
JAX_SPEC="${JAX_SPEC:-jax[tpu]}"

EXTRA="$*"
MOUNT=""
if [ -n "$BUCKET" ]; then
  MOUNT="sudo mkdir -p /mnt/shared && sudo chown \$USER /mnt/shared && (mountpoint -q /mnt/shared || gcsfuse --implicit-dirs $BUCKET /mnt/shared) &&"
fi

REMOTE="set -euo pipefail; $MOUNT
python3 -m pip install -q -U '$JAX_SPEC' -f https://storage.googleapis.com/jax-releases/libtpu_releases.html
if [ -d posteriorjax ]; then git -C posteriorjax fetch -q origin; else git clone -q $REPO posteriorjax; fi
git -C posteriorjax checkout -q $REVISION && git -C posteriorjax pull -q --ff-only || true
cd posteriorjax && python3 -m pip install -q -e .
mkdir -p $WORKDIR
python3 -m experiments.sweep --distributed --config=$CONFIG --workdir=$WORKDIR $EXTRA 2>&1 | tee -a $WORKDIR/log.\$(hostname).txt"

CMD=(gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --worker=all --command="$REMOTE")
[ -n "$PROJECT" ] && CMD+=(--project="$PROJECT")

if [ "${DRY_RUN:-0}" = "1" ]; then
  printf '%q ' "${CMD[@]}"; echo
else
  "${CMD[@]}"
fi
