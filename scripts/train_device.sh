#!/usr/bin/env bash
# Prepared accelerator run: train (or resume) the networks of a sweep config on a lent GPU within
# one command, and bring them back.
#
#   bash scripts/train_device.sh CONFIG OUT [SECONDS]   train until done or SECONDS (default 540)
#   bash scripts/train_device.sh --dry-run CONFIG       list its networks (kind, backbone,
#                                                       parameters, steps, whether trained); train nothing
#
# CONFIG is a sweep config with its argument, e.g. configs/main_table.py:medium:poisson_fixed. The
# networks train in runs/device/ (ignored by git; carry `runs/device` to the next call to resume)
# exactly as `python -m experiments.sweep --config=CONFIG --workdir=W --stage=networks` trains them
# on a CPU: the same training configs, directories (networks/<task>/<kind>-<hash>) and scores. At
# SECONDS the run gets SIGINT; a network stops at its last checkpoint and resumes from it next
# time. Then every network directory (finished or not) is copied to OUT/networks, with
# OUT/networks.txt (the --dry-run listing after the run) and OUT/train.log: copy OUT/networks/*
# into the CPU workdir's networks/ and the sweep loads them instead of training.
#
# The device image has JAX, Equinox, Optax and absl but not ml_collections or orbax's versions of
# this project: carry them as wheels (/work/.library/device/README.md) and set PYTHONPATH.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(command -v python || command -v python3)}

list_networks() {  # CONFIG WORKDIR: one JSON line per network of the config
    "$PY" - "$1" "$2" <<'EOF'
import importlib.util, json, sys
from pathlib import Path

from posteriorjax.sweep import sizing
from posteriorjax.sweep.settings import settings

path, _, arg = sys.argv[1].partition(":")
spec = importlib.util.spec_from_file_location("device_config", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
config = module.get_config(arg) if arg else module.get_config()
sizes, _ = sizing.network_sizes(settings(config))
for name, size in sorted(sizes.items()):
    trained = (Path(sys.argv[2]) / "networks" / name / "scores.json").exists()
    print(json.dumps({"network": name, "kind": size["kind"], "model": size["model"],
                      "parameters": size["parameters"], "steps": size["train_steps"], "trained": trained}))
EOF
}

if [ "${1:-}" = "--dry-run" ]; then
    [ $# -eq 2 ] || { echo "usage: $0 --dry-run CONFIG" >&2; exit 2; }
    list_networks "$2" runs/device
    exit $?
fi
[ $# -ge 2 ] && [ $# -le 3 ] || { echo "usage: $0 CONFIG OUT [SECONDS]" >&2; exit 2; }
CONFIG=$1
OUT=$2
SECONDS_LIMIT=${3:-540}
case $SECONDS_LIMIT in
    ''|*[!0-9]*) echo "SECONDS: expected a positive integer, got '$SECONDS_LIMIT'" >&2; exit 2 ;;
esac
mkdir -p "$OUT" runs/device
"$PY" -c "import jax; print('devices:', jax.devices())" 2>&1 | tee "$OUT/train.log"
timeout -s INT "$SECONDS_LIMIT" "$PY" -m experiments.sweep --config="$CONFIG" --workdir=runs/device \
    --stage=networks 2>&1 | tee -a "$OUT/train.log"
rc=${PIPESTATUS[0]}
echo "train rc=$rc (124: stopped at $SECONDS_LIMIT s; rerun to resume)" | tee -a "$OUT/train.log"
if [ -d runs/device/networks ]; then
    cp -r runs/device/networks "$OUT/"
fi
list_networks "$CONFIG" runs/device > "$OUT/networks.txt"
exit "$rc"
