"""Migrate a workdir written by an earlier version: `python -m experiments.migrate --workdir=DIR`.

The one migration path of the project's on-disk formats (`posteriorjax.sweep.migrate`, where
each format is listed): rewrites `results.jsonl` lines written before digests or with config ids
in numpy's repr (the old file kept as `results.jsonl.pre-migration`), removes the records scored
before the held-out split, rewrites the config ids of stored samples, moves single-file
references into their checksummed sets, and builds every task's held-out reference from the
workdir's own config and keys. Then rerun the sweep (and `experiments.evaluate` for samples from
files) to re-score the removed rows on the held-out set. Prints what was done, as JSON.
"""

import json

from absl import app, flags

from posteriorjax import console
from posteriorjax.sweep import migrate

_WORKDIR = flags.DEFINE_string("workdir", None, "Sweep or export workdir (holds config.json).")
_PLUGINS = console.define_plugins_flag()


def main(argv):
    del argv
    from posteriorjax import plugins  # the registries (and JAX): only once --help is past

    console.setup_logging()
    plugins.load(_PLUGINS.value)
    print(json.dumps(migrate.migrate(_WORKDIR.value), indent=1))


if __name__ == "__main__":
    flags.mark_flags_as_required(["workdir"])
    app.run(main)
