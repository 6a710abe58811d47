"""Migrate a workdir scored before the held-out split: `python -m experiments.migrate_heldout --workdir=DIR`.

Sets the records without a reference tag aside (`results.jsonl.pre-heldout`, the old file kept
whole) and builds every task's held-out reference from the workdir's own config and keys
(`posteriorjax.reference.heldout.migrate`); rerun the sweep (and `experiments.evaluate` for
samples from files) to re-score the set-aside rows on the held-out set.
"""

import json

from absl import app, flags

from posteriorjax import console, plugins
from posteriorjax.reference import heldout

_WORKDIR = flags.DEFINE_string("workdir", None, "Sweep or export workdir (holds config.json).")
_PLUGINS = plugins.define_flag()


def main(argv):
    del argv
    console.setup_logging()
    plugins.load(_PLUGINS.value)
    print(json.dumps(heldout.migrate(_WORKDIR.value), indent=1))


if __name__ == "__main__":
    flags.mark_flags_as_required(["workdir"])
    app.run(main)
