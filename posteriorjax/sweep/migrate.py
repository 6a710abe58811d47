"""The one migration path of workdirs written by earlier versions: `python -m experiments.migrate`.

Until the first release the project migrates its own earlier on-disk formats in one explicit
step, never on read: the readers (`store`, `samples`, `reference.registry`) take today's formats
only, and the sweep, `exchange.export` and `exchange.evaluate` refuse a workdir that holds an
earlier one (`check`: a ValueError listing what and naming the command). `migrate(workdir)`
rewrites each earlier format it finds, atomically, keeping what it replaces:

  * configuration ids in numpy's repr (`g=np.float32(2.0)`, written before `canonical_number`),
    in `results.jsonl` and in the stored samples: rewritten in today's form
    (`migrate_config_id`);
  * records scored before the held-out split (no reference tag in `scored`): removed, to be
    re-scored on the held-out set by a rerun (the sweep's rows) or by `experiments.evaluate`
    on the same samples (rows scored from a file);
  * a reference in the single-file form (`references/<task>.npz`): moved into the checksummed
    set `references/<task>/` (`reference.store.save_references`), then removed;

then builds every task's held-out reference from the workdir's own config and root key. The old
`results.jsonl` is copied to `results.jsonl.pre-migration` (`-<n>` when taken) before it is
rewritten. A workdir in today's formats only gets its held-out sets built (a no-op when they exist).
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import numpy as np

from posteriorjax import files
from posteriorjax.reference import heldout
from posteriorjax.reference import store as artifact_store
from posteriorjax.sweep import store
from posteriorjax.sweep.plan import Plan
from posteriorjax.sweep.settings import settings

COMMAND = "python -m experiments.migrate --workdir={workdir}"
ASIDE = "results.jsonl.pre-migration"

_NUMPY_SCALAR_REPR = re.compile(r"np\.(?:float|int|uint)\d+\(([^()]*)\)")


def migrate_config_id(config_id: str) -> str:
    """A config id written before `store.canonical_number` (values in numpy's repr), in today's form.

    numpy >= 2 wrote `flip=np.float32(2.0)`, numpy 1 `flip=2.0`; both hold the shortest
    decimal of the value in its dtype, so unwrapping it and passing it through `repr(float)`
    gives `canonical_number`'s string. Ids already canonical are returned unchanged.
    """
    parts = []
    for part in _NUMPY_SCALAR_REPR.sub(r"\1", config_id).split(";"):
        name, sep, value = part.partition("=")
        if sep and name not in ("case", "seed"):
            try:
                value = repr(float(value))
            except ValueError:
                pass
        parts.append(name + sep + value)
    return ";".join(parts)


def _lines(path: Path) -> list[tuple[str, dict | None]]:
    """(line, its JSON object or None when it is not one) of every non-blank line of `path`."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            values = json.loads(line)
        except json.JSONDecodeError:
            values = None
        out.append((line, values if isinstance(values, dict) else None))
    return out


def _legacy_references(workdir: Path) -> list[Path]:
    """Single-file references (`references/<task>.npz`) with no checksummed set beside them."""
    root = workdir / "references"
    return (
        sorted(p for p in root.glob("*.npz") if not (root / p.stem / files.MANIFEST).exists())
        if root.is_dir()
        else []
    )


def _sample_files(workdir: Path) -> list[Path]:
    return sorted((workdir / "samples").glob("*/*.npz"))


def _stored_config_ids(sample_file: Path) -> list[str]:
    """The config ids a sample file stores; none when it cannot be read (a truncated or corrupted
    file is the reader's to set aside and recompute, `store.verify_workdir`, not a migration's)."""
    try:
        with np.load(sample_file) as z:
            return [str(c) for c in z["config_id"]] if "config_id" in z.files else []
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return []


def earlier_formats(workdir) -> list[str]:
    """What in `workdir` is in an earlier format, one line each (empty: nothing to migrate).

    Lines that are not JSON objects and sample files that cannot be read are left to the reader
    (`store.scan_records` and the healing of `store.verify_workdir` set them aside).
    """
    workdir, found = Path(workdir), []
    path = workdir / "results.jsonl"
    if path.exists():
        objects = [v for _, v in _lines(path) if v is not None]
        old_ids = sum(migrate_config_id(str(v.get("config_id"))) != v.get("config_id") for v in objects)
        pre_split = len(heldout.pre_split([v for v in objects if "task" in v]))
        for n, what in (
            (old_ids, "with config ids in numpy's repr"),
            (pre_split, "scored before the held-out split"),
        ):
            if n:
                found.append(f"{path}: {n} record(s) {what}")
    for sample_file in _sample_files(workdir):
        ids = _stored_config_ids(sample_file)
        if any(migrate_config_id(c) != c for c in ids):
            found.append(f"{sample_file}: config ids in numpy's repr")
    found += [f"{p}: a reference in the single-file form" for p in _legacy_references(workdir)]
    return found


def check(workdir) -> None:
    """Raise a ValueError naming what to migrate and the command when `workdir` holds an earlier format."""
    found = earlier_formats(workdir)
    if found:
        raise ValueError(
            f"workdir: {workdir} was written by an earlier version of posteriorjax; migrate it first: "
            f"{COMMAND.format(workdir=workdir)} (the old results.jsonl is kept as {ASIDE}):\n  "
            + "\n  ".join(found)
        )


def migrate_results(path, config_hash: str) -> dict:
    """Rewrite `results.jsonl` at `path` in today's form (module doc); returns the counts.

    `config_hash`: the hash a line without one gets (`store.workdir_config_hash`). A line that
    is not a record, or whose digest does not match, is kept as it is for the reader
    to set aside. The old file is copied aside (`ASIDE`) first, once anything changes.
    """
    path = Path(path)
    out = {"rewritten": 0, "set_aside": 0, "aside": None}
    lines = []
    for line, values in _lines(path):
        if values is None or (store.DIGEST in values and values[store.DIGEST] != store.record_digest(values)):
            lines.append(line)
            continue
        values = {k: v for k, v in values.items() if k != store.DIGEST}
        stored_hash = str(values.pop(store.CONFIG_HASH, config_hash))
        values["config_id"] = migrate_config_id(str(values["config_id"]))
        record = store.Record.from_dict(values)
        if heldout.pre_split([record]):
            out["set_aside"] += 1
            continue
        new = store.record_line(record, stored_hash)
        out["rewritten"] += new != line
        lines.append(new)
    if out["rewritten"] or out["set_aside"]:
        out["aside"] = str(heldout.set_aside(path, ASIDE))
        files.atomic_write_lines(path, lines)
    return out


def migrate_samples(path) -> bool:
    """Rewrite the config ids of a stored samples file in today's form; True when it changed."""
    arrays = files.read_arrays_checked(path)
    ids = [str(c) for c in arrays["config_id"]]
    new = [migrate_config_id(c) for c in ids]
    if new == ids:
        return False
    files.write_arrays_checked(path, {**arrays, "config_id": np.asarray(new)})
    return True


def move_reference(path, task) -> bool:
    """Move a single-file reference (`references/<task>.npz`) into its checksummed set beside it
    (`references/<task>/`) and remove it; False (left as it is) when `task` is None or not the
    task configuration it was built for."""
    path = Path(path)
    stored = files.read_arrays(path)
    manifest = {k: str(stored.pop(k)) for k in ("task_hash", "method", "settings")}
    if task is None or manifest["task_hash"] != task.config_hash():
        return False
    info = json.loads(str(stored.pop("info")))
    method, identity = manifest["method"], manifest["settings"]
    artifact_store.save_references(
        path.with_suffix(""), stored, task, method=method, settings=identity, info=info
    )
    path.unlink()
    return True


def migrate(workdir) -> dict:
    """Migrate `workdir` (module doc); returns what was done."""
    workdir = Path(workdir)
    config = store.workdir_config(workdir)
    plan = Plan.build(settings(config))
    out = {"results": None, "samples": [], "references": [], "tasks": {}}
    path = workdir / "results.jsonl"
    if path.exists():
        out["results"] = migrate_results(path, store.workdir_config_hash(workdir))
    out["samples"] = [str(p) for p in _sample_files(workdir) if migrate_samples(p)]
    out["references"] = [
        str(p) for p in _legacy_references(workdir) if move_reference(p, plan.tasks.get(p.stem))
    ]
    for name in plan.tasks:
        samples, weights, report = plan.reference(name, workdir, lead=True, progress=False)
        which = heldout.HELDOUT if name not in plan.given else heldout.GIVEN
        out["tasks"][name] = heldout.tag(which, samples, weights, report)
    return out
