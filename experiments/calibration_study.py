"""The synthetic many-to-one study of the calibration protocol (`posteriorjax.studies.bimodal`).

    python -m experiments.calibration_study --config=configs/calibration_protocol.py --workdir=DIR

Runs the config's `synthetic` section: trains the MSE point estimator and the mixture-density
estimator, samples them and the exact posterior, and writes `DIR/synthetic.md` (the table) and
`DIR/synthetic.json` (every number and the section used). The PDE part of the protocol is the
sweep of the same config (`python -m experiments.sweep --config=configs/calibration_protocol.py`).
"""

import json
from pathlib import Path

from absl import flags
from ml_collections import config_flags

from posteriorjax import cli, console
from posteriorjax.studies import bimodal

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config with a `synthetic` section.", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.")


def main(argv):
    del argv
    console.setup_logging()  # --verbosity; other libraries' INFO messages only at --verbosity=1
    result = bimodal.run(_CONFIG.value.synthetic.to_dict())
    table = bimodal.table(result)
    workdir = Path(_WORKDIR.value)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "synthetic.md").write_text(table + "\n")
    (workdir / "synthetic.json").write_text(json.dumps(result, indent=2, sort_keys=True))
    print(table)


if __name__ == "__main__":
    cli.execute(
        main, doc=__doc__, required=["config", "workdir"], reserve_cpu_threads=True, compilation_cache=True
    )
