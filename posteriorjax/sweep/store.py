"""Store: the records of a sweep on disk, one schema, one reader, one grouping key.

A `Record` is one configuration of one (task, sampler) pair: its id, case, seed,
hyperparameters and metrics (`to_json`/`from_json`, one JSON object per line of
`results.jsonl`, each line with its config hash and digest). `read_records` is the one reader
(`scan_records`: a torn, garbled or edited line is skipped with a warning, the records after it
kept); `ResultsFile` appends chunks crash-safely and resumes; `verify_workdir` checks records,
references and stored samples; `row_key` / `hparams_key` is the one grouping key of the
tables (`results`) and figures (`records`, `figures`). With several processes each writes
`results.p<k>.jsonl` and process 0 `assemble`s them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np

from posteriorjax import files
from posteriorjax.reference import store as artifact_store

# ----------------------------------------------------------------------------
# Ids and the grouping key


def canonical_number(value) -> str:
    """`value` as it goes into a config id: an integer as `str(int)`, a float as Python's
    `repr(float)` of the shortest decimal that round-trips in the value's own dtype
    (`np.float32(0.1)` -> `0.1`, `np.float64(1e-5)` -> `1e-05`), whatever numpy's version."""
    a = np.asarray(value)
    if a.ndim != 0:
        raise ValueError(f"value: expected a scalar, got shape {a.shape}")
    if a.dtype.kind in "biu":
        return str(int(a))
    if a.dtype.kind != "f":
        raise ValueError(f"value: expected an integer or float, got dtype {a.dtype}")
    return repr(float(np.format_float_scientific(a[()], unique=True)))


def hparams_key(hparams: Mapping[str, float]) -> tuple:
    """Hashable, sorted `((name, value), ...)` of a hyperparameter setting, values rounded to float32.

    The grid holds float32 values (`program.expand`); records store them as float64 and
    `.npz` sample files as float32, so rounding makes the two agree.
    """
    return tuple(sorted((k, float(np.float32(v))) for k, v in hparams.items()))


def row_key(record: Mapping) -> tuple:
    """The row of a table a record belongs to: `(task, sampler, hparams_key(hparams))`."""
    return (record["task"], record["sampler"], hparams_key(record["hparams"]))


# ----------------------------------------------------------------------------
# The record


def jsonable(value):
    """A metric value as JSON: a scalar (non-finite -> None) or nested lists of them."""
    arr = np.asarray(value)
    if arr.ndim == 0:
        v = arr.item()
        return None if isinstance(v, float) and not math.isfinite(v) else v
    return [jsonable(v) for v in arr]


_TYPES = {int: (int,), float: (int, float), str: (str,), dict: (dict,)}


@dataclasses.dataclass(frozen=True, eq=False)  # compared as a mapping (equal to its JSON object)
class Record(Mapping):
    """One configuration's result; read as a mapping too (`record["task"]`, `record.get(...)`).

    Fields in the order of a `results.jsonl` line. `metrics` values are numbers, None
    (non-finite) or lists; `evaluation` (`Task.evaluation_name`) defaults to "identity",
    the only value before it was recorded; `cases` says which cases were scored: "study" (the
    workdir config's own, the only value before it was recorded) or, for samples scored on a
    given cases file (`exchange.evaluate(..., cases_file=...)`), "<file name> sha256:<digest>".
    `networks`: what the sampler's trained networks are, {builder option: {kind, network (its
    directory), parameters, num_parameters, training_steps, scores, floor}}
    (`sweep.networks.network_record`); empty for samplers without one and records before it.
    `scored` says what the record was scored on: `reference` (`reference.heldout.tag`: the set,
    its method and checksum) and, for samples from a file, `cases_file` and `samples` (path,
    checksum, reader, dtype); empty (and not stored) for records written before it existed.
    """

    task: str
    sampler: str
    config_id: str
    index: int
    case: int
    seed: int
    hparams: dict
    num_samples: int
    metrics: dict
    wall_time_s: float
    compile_time_s: float
    evaluation: str = "identity"
    cases: str = "study"
    networks: dict = dataclasses.field(default_factory=dict)
    scored: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, _TYPES[_annotation(f)]):
                raise ValueError(f"record.{f.name}: expected {f.type}, got {value!r}")

    @classmethod
    def from_dict(cls, values: Mapping) -> Record:
        """A record from its JSON object (today's form only: `sweep.migrate` rewrites earlier ones)."""
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(names))
        missing = [
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
            and f.name not in values
        ]
        if unknown or missing:
            raise ValueError(f"record: expected the keys {names}; unknown {unknown}, missing {missing}")
        return cls(**values)

    @classmethod
    def from_json(cls, line: str) -> Record:
        return cls.from_dict(json.loads(line))

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self._names()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    # the mapping protocol, so tables and figures read a record as they read its JSON object
    def __getitem__(self, name: str) -> Any:
        if name not in self._names():
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def _names(self) -> tuple[str, ...]:
        """The keys of the record's JSON object: every field, `cases` only where it is not
        "study" and `networks` only where there are some (so a sweep's lines, and their digests,
        are as before they were recorded)."""
        return tuple(
            f.name
            for f in dataclasses.fields(self)
            if not (f.name == "cases" and self.cases == "study")
            and not (f.name == "networks" and not self.networks)
            and not (f.name == "scored" and not self.scored)
        )


def _annotation(field) -> type:
    return {"str": str, "int": int, "float": float, "dict": dict}[str(field.type)]


# ----------------------------------------------------------------------------
# Reading and writing


DIGEST, CONFIG_HASH = "digest", "config_hash"  # the keys a stored line adds to its record


def config_hash(config_values: Mapping) -> str:
    """SHA-256 (16 hex digits) of a sweep config as stored in `config.json` (sorted keys, no `overwrite`)."""
    values = {k: v for k, v in config_values.items() if k != "overwrite"}
    return files.json_digest(values, 16)


def workdir_config(workdir) -> ml_collections.ConfigDict:
    """The config a workdir was prepared with (`config.json`; ValueError when it has none)."""
    path = Path(workdir) / "config.json"
    if not path.is_file():
        raise ValueError(
            f"workdir: {workdir} has no config.json; run experiments.export (or the sweep) on it first"
        )
    values = json.loads(path.read_text())
    values.setdefault("overwrite", False)  # not stored: prepare_workdir drops it
    return ml_collections.ConfigDict(values)


def workdir_config_hash(workdir) -> str:
    """`config_hash` of a workdir's `config.json`: the hash every record written there carries."""
    return config_hash(json.loads((Path(workdir) / "config.json").read_text()))


def record_digest(values: Mapping) -> str:
    """SHA-256 of a stored line's content: every key but `digest`, as sorted JSON."""
    content = {k: v for k, v in values.items() if k != DIGEST}
    return files.json_digest(content)


def record_line(record: Record, config: str) -> str:
    """The `results.jsonl` line of a record: its fields, the config hash, the digest of both."""
    values = {**record.to_dict(), CONFIG_HASH: config}
    return json.dumps({**values, DIGEST: record_digest(values)})


@dataclasses.dataclass(frozen=True)
class BadLine:
    """A line of a JSON-lines file that is not a verified record: 1-based `number`, `reason`, `text`."""

    number: int
    reason: str
    text: str


@dataclasses.dataclass(frozen=True)
class Scan:
    """What `scan_records` found: the records, the config hash of each (None: a line without a
    digest), the bad lines."""

    records: list[Record]
    hashes: list[str | None]
    bad: list[BadLine]


def _parse_line(line: str) -> tuple[Record, str | None]:
    """(record, its config hash or None when the line has no digest); ValueError saying what failed."""
    try:
        values = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON ({err.msg})") from err
    if not isinstance(values, dict):
        raise ValueError(f"not a record (a JSON {type(values).__name__})")
    if DIGEST in values and values[DIGEST] != record_digest(values):
        raise ValueError("digest mismatch (the line was edited after it was written)")
    digested = DIGEST in values
    stored_hash = values.pop(CONFIG_HASH, "")
    values.pop(DIGEST, None)
    return Record.from_dict(values), (str(stored_hash) if digested else None)


def scan_records(path) -> Scan:
    """Every line of a JSON-lines file checked: records (digest verified when present) and bad lines.

    Blank lines are skipped. A bad line (torn by a kill, not JSON, not a record, or failing
    its digest) is reported and skipped; the records after it are kept. A line without a digest
    (written by hand, or by a tool that does not add one) is a record whose content is unverified.
    """
    path = Path(path)
    records, hashes, bad = [], [], []
    if not path.exists():
        return Scan(records, hashes, bad)
    for i, line in enumerate(path.read_text(errors="replace").splitlines()):
        if not line.strip():
            continue
        try:
            record, stored_hash = _parse_line(line)
        except (ValueError, TypeError, KeyError) as err:
            bad.append(BadLine(i + 1, str(err), line))
            continue
        records.append(record)
        hashes.append(stored_hash)
    return Scan(records, hashes, bad)


def describe_bad_lines(path, bad: list[BadLine]) -> str:
    """One message naming `path` and, per bad line, its number and what failed."""
    return "; ".join(f"{path}: line {b.number}: {b.reason}" for b in bad)


def read_records(path) -> list[Record]:
    """The verified records of a JSON-lines file (`scan_records`; the file is not modified).

    Bad lines (a torn last line from a kill mid-write, a garbled or edited line) are skipped
    with a warning naming the file and the lines; the records after them are kept.
    """
    scan = scan_records(path)
    if scan.bad:
        warnings.warn(
            f"skipped {len(scan.bad)} bad line(s): {describe_bad_lines(path, scan.bad)}", stacklevel=2
        )
    return scan.records


class ResultsFile:
    """Append-only JSON-lines records with crash-safe resume.

    Each chunk's records are appended in one write and fsync-ed, each line carrying the
    config hash and the digest (`record_line`). On open, bad lines (`scan_records`: torn,
    garbled, edited) are dropped: the file is copied aside (`<name>.corrupt-<n>`, with a
    warning) and rewritten atomically with the good records, so their configurations are
    recomputed; a line without a digest is rewritten with one. `config`: the config hash
    (`config_hash`, `workdir_config_hash`) the new and the undigested lines carry. Lines of an
    earlier version's format are `sweep.migrate`'s, not this reader's.
    """

    def __init__(self, path, config: str):
        self.path, self.config = Path(path), config
        scan = scan_records(self.path)
        self.records: list[Record] = scan.records
        if not self.path.exists():
            return
        lines = [
            record_line(r, self.config if h is None else h)
            for r, h in zip(scan.records, scan.hashes, strict=True)
        ]
        if self.path.read_text(errors="replace").splitlines() != lines:
            if scan.bad:
                files.copy_aside(self.path, describe_bad_lines(self.path, scan.bad))
            files.atomic_write_lines(self.path, lines)

    def done(self, pair: tuple[str, str]) -> set[str]:
        return {r.config_id for r in self.records if (r.task, r.sampler) == pair}

    def append(self, records: list[Record]) -> None:
        files.append_lines(self.path, [record_line(r, self.config) for r in records])
        self.records.extend(records)


def process_results_path(workdir, process: int) -> Path:
    """The results file process `process` of a multi-host sweep writes: `results.p<k>.jsonl`."""
    return Path(workdir) / f"results.p{process}.jsonl"


def _process_files(workdir) -> list[Path]:
    return sorted(Path(workdir).glob("results.p*.jsonl"))


def assemble(workdir, store: ResultsFile, pair: tuple[str, str]) -> list[Record]:
    """Append to `store` the records of `pair` found in every `results.p<k>.jsonl` but not yet in it.

    New records go in grid order (`index`); duplicates (the same config id in
    several files, or already stored) are written once. Returns the new records.
    """
    have = store.done(pair)
    new = {}
    for path in _process_files(workdir):
        for r in read_records(path):
            if (r.task, r.sampler) == pair and r.config_id not in have:
                new.setdefault(r.config_id, r)
    records = sorted(new.values(), key=lambda r: r.index)
    if records:
        store.append(records)
    return records


def done_everywhere(workdir, pair: tuple[str, str]) -> set[str]:
    """Config ids of `pair` in `results.jsonl` or any process file (the same set on every process)."""
    paths = [Path(workdir) / "results.jsonl", *_process_files(workdir)]
    return {r.config_id for p in paths for r in read_records(p) if (r.task, r.sampler) == pair}


def prepare_workdir(workdir, config) -> ResultsFile:
    """Create `workdir`, or resume it when it holds the same config; refuse a different one.

    With `overwrite` and a different config, results, stored samples and
    process files are discarded (networks, pools and references are kept:
    they are keyed or checked by their own settings).
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "config.json"
    current = json.loads(config.to_json_best_effort(sort_keys=True))
    current.pop("overwrite", None)
    if config_path.exists():
        stored = json.loads(config_path.read_text())
        stored.pop("overwrite", None)
        if stored != current:
            if not config.overwrite:
                raise ValueError(
                    f"workdir: {workdir} holds results of a different config; use another workdir "
                    "or pass --config.overwrite=True to discard them"
                )
            for name in ("results.jsonl", "results.csv", "summary.md", "calibration.json"):
                (workdir / name).unlink(missing_ok=True)
            for path in _process_files(workdir):
                path.unlink()
            shutil.rmtree(workdir / "samples", ignore_errors=True)
    files.atomic_write_bytes(config_path, json.dumps(current, indent=2, sort_keys=True).encode())
    return ResultsFile(workdir / "results.jsonl", config_hash(current))


def reference_directory(workdir, task_name: str) -> Path:
    """The checksummed public reference set of a task in a workdir (`references/<task>/`)."""
    return Path(workdir) / "references" / task_name


def read_reference(workdir, task_name: str) -> dict[str, np.ndarray] | None:
    """`ref_samples`, `ref_weights`, `x_true`, `y_obs` of a task's stored reference, or None.

    The held-out set the rows are scored on (`reference.heldout`) when present, else the
    public checksummed set (`reference.store.save_references`).
    """
    directory = reference_directory(workdir, task_name)
    held = directory.with_name(f"{directory.name}.heldout")
    if (held / files.MANIFEST).exists():
        return artifact_store.load_references(held)[1]
    if (directory / files.MANIFEST).exists():
        return artifact_store.load_references(directory)[1]
    return None


def verify_workdir(workdir) -> list[str]:
    """What in a sweep workdir fails verification, one message per problem (empty: all verified).

    Checks every line of `results.jsonl` (`scan_records`: torn, garbled, edited, or written
    under another config than `config.json`'s), every stored reference set (its manifest's
    checksum) and every stored samples file (`files.read_arrays_checked`). Nothing is modified.
    """
    workdir, problems = Path(workdir), []
    config_path, results = workdir / "config.json", workdir / "results.jsonl"
    scan = scan_records(results)
    problems += [f"{results}: line {b.number}: {b.reason}" for b in scan.bad]
    if config_path.exists():
        want = workdir_config_hash(workdir)
        wrong = [r.config_id for r, h in zip(scan.records, scan.hashes, strict=True) if h not in (None, want)]
        if wrong:
            problems.append(
                f"{results}: {len(wrong)} record(s) were written under another config than {config_path} "
                f"(hash {want}), e.g. {wrong[0]}"
            )
    for directory in sorted((workdir / "references").glob("*")):
        if ".corrupt-" in directory.name:  # set aside by a rerun, kept for inspection only
            continue
        try:
            if (directory / files.MANIFEST).exists():
                artifact_store.load_references(directory)
            elif directory.suffix == ".npz":
                files.read_arrays(directory)
        except files.CorruptFile as e:
            problems.append(f"reference {directory}: {e}")
    for path in sorted((workdir / "samples").glob("*/*.npz")):
        try:
            files.read_arrays_checked(path)
        except files.CorruptFile as e:
            problems.append(f"samples {path}: {e}")
    return problems
