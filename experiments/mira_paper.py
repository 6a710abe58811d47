"""Reproduce the MIRA paper's synthetic experiments: `posteriorjax.studies.mira_paper`.

    python -m experiments.mira_paper --config=configs/mira_paper.py --workdir=DIR

Writes `DIR/mira_paper.md` (the tables) and `DIR/mira_paper.json` (every number and the config).
"""

import json
from pathlib import Path

from absl import flags
from ml_collections import config_flags

from posteriorjax import cli
from posteriorjax.studies import mira_paper

_CONFIG = config_flags.DEFINE_config_file("config", None, "configs/mira_paper.py", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.")


def main(argv):
    del argv
    config = _CONFIG.value.to_dict()
    result = mira_paper.run(config)
    workdir = Path(_WORKDIR.value)
    workdir.mkdir(parents=True, exist_ok=True)
    text = mira_paper.table(result)
    (workdir / "mira_paper.md").write_text(text + "\n")
    record = {"config": config, "result": result}
    (workdir / "mira_paper.json").write_text(json.dumps(record, indent=2, default=str))
    print(text)


if __name__ == "__main__":
    cli.execute(main, doc=__doc__, required=["config", "workdir"])
