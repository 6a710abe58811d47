#!/usr/bin/env bash
# Prepared accelerator run, under 10 minutes on one GPU (sized for an H200): the same JSON
# records as the CPU benchmarks, one file per step, in OUT (default ./gpu_check).
#
#   bash scripts/gpu_check.sh [OUT]          run every step (each under its own timeout)
#   bash scripts/gpu_check.sh --dry-run      check that every step's benchmarks exist; run nothing
#
# Steps (scripts/benchmark.py --device):
#   spectral        FNO/UNO spectral layers, matmul path vs FFT (forward + VJP); cosine GRF
#   metrics         suite.compute cases/s (and vs the sorted paths and POT/properscoring/NumPy)
#   reference_pool  Darcy / Poisson pool candidates/s (+ the time of a 2M-candidate pool)
#   fundps_full     one FunDPS case at 128^2, untrained full-size UNO: time, NFE, samples/s
#   sweep           the sweep program vs a Python loop of jitted calls
#   roofline        matmul and FFT GFLOP/s, elementwise GB/s, sort Melem/s on this device
# A step that fails or times out is recorded in OUT/status.txt and the next one runs; each
# step's JSON is rewritten after every benchmark, so a step stopped by its limit keeps what
# it measured. OUT/devices.txt records the devices and the versions the run used.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(command -v python || command -v python3)}
STEPS=("spectral 150" "metrics 100" "reference_pool 40" "fundps_full 150" "sweep 110" "roofline 20")

if [ "${1:-}" = "--dry-run" ]; then
    names=()
    for step in "${STEPS[@]}"; do names+=("${step%% *}"); done
    exec "$PY" scripts/benchmark.py --device --list --only="$(IFS=,; echo "${names[*]}")"
fi

OUT=${1:-gpu_check}
mkdir -p "$OUT"
"$PY" - <<'EOF' 2>&1 | tee "$OUT/devices.txt"
import importlib.metadata as md, platform, jax
print("devices:", jax.devices(), "backend:", jax.default_backend(), "python:", platform.python_version())
print(", ".join(f"{n} {md.version(n)}" for n in ("jax", "jaxlib", "equinox", "optax", "numpy", "scipy")))
EOF
: > "$OUT/status.txt"
for step in "${STEPS[@]}"; do
    name=${step%% *}
    limit=${step##* }
    start=$(date +%s)
    timeout "$limit" "$PY" scripts/benchmark.py --device --only="$name" --json="$OUT/$name.json" \
        2>&1 | tee "$OUT/$name.log"
    rc=${PIPESTATUS[0]}
    echo "$name rc=$rc seconds=$(( $(date +%s) - start ))" | tee -a "$OUT/status.txt"
done
