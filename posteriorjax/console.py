"""Console output: absl logging without third-party chatter, and progress that suits where it is shown.

* `setup_logging()` (called by every entry point): this project's messages go through
  `absl.logging` at the level `--verbosity` sets (0: INFO, the default; -1: warnings only);
  INFO and DEBUG messages of other libraries (orbax's checkpoint messages, which arrive through
  absl's logger too, jax's backend probing) are dropped unless `--verbosity >= 1`. Warnings and
  errors always pass.
* `interactive()`: progress bars (tqdm) only on a terminal outside CI; under `CI=true` or when
  stderr is not a TTY, long stages print one line when they start and one when they end.
* `Steps`: the stages of a command run one after the other, a line as each starts and ends.
* `StudyProgress`: the progress of a whole sweep (pair k of n, configurations done of the
  study, compile vs run time, ETA) and `bar` for pool builds and training.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from pathlib import Path

from absl import flags
from absl import logging as absl_logging
from tqdm.auto import tqdm

_ROOT = Path(__file__).resolve().parent.parent
# files whose INFO messages are shown: the library, the entry points, the configs and scripts
_OWN = tuple(str(_ROOT / d) + os.sep for d in ("posteriorjax", "experiments", "configs", "scripts"))
# Python loggers of dependencies that log INFO on their own (not through absl)
THIRD_PARTY_LOGGERS = ("jax", "orbax", "etils", "tensorstore", "flax", "matplotlib", "PIL")


class _OwnInfoOnly(logging.Filter):
    """Passes warnings from anywhere, INFO and DEBUG only from this project's files."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or os.path.abspath(record.pathname).startswith(_OWN)


_FILTER = _OwnInfoOnly()


def setup_logging(verbosity: int | None = None) -> None:
    """Drop other libraries' INFO/DEBUG messages unless `verbosity` (default: absl's) is >= 1. Idempotent."""
    if verbosity is not None:
        absl_logging.set_verbosity(verbosity)
    chatty = absl_logging.get_verbosity() >= 1  # --verbosity=1: absl DEBUG, show everything
    absl_logger = absl_logging.get_absl_logger()
    if chatty:
        absl_logger.removeFilter(_FILTER)
    elif _FILTER not in absl_logger.filters:
        absl_logger.addFilter(_FILTER)
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if chatty else logging.WARNING)


def interactive() -> bool:
    """True on a terminal outside CI: progress bars are drawn; otherwise a line per stage."""
    ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    return not ci and sys.stderr.isatty()


def duration(seconds: float) -> str:
    """`seconds` as `42 s`, `3 min 05 s` or `2 h 07 min`."""
    s = max(0, round(float(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Stage:
    """A long stage (a pool build, a training run) of `total` units: a tqdm bar when `interactive()`,
    else one INFO line at the start and one at the end. Use as a context manager; `update(n)`."""

    def __init__(self, description: str, total: int, unit: str, *, initial: int = 0, enabled: bool = True):
        self.description, self.total, self.unit, self.initial = description, int(total), unit, int(initial)
        self.enabled, self.done, self.bar, self.start = enabled, int(initial), None, None

    def __enter__(self) -> Stage:
        self.start = time.perf_counter()
        if not self.enabled or self.done >= self.total:
            return self
        if interactive():
            self.bar = tqdm(
                total=self.total,
                initial=self.initial,
                desc=self.description,
                unit=self.unit,
                dynamic_ncols=True,
            )
        else:
            todo = self.total - self.done
            absl_logging.info("%s: %d of %d %s to do", self.description, todo, self.total, self.unit)
        return self

    def update(self, n: int = 1, **postfix) -> None:
        self.done += n
        if self.bar is not None:
            if postfix:
                self.bar.set_postfix(postfix, refresh=False)
            self.bar.update(n)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.done > self.initial and exc[0] is None:
            absl_logging.info(
                "%s: %d %s in %s",
                self.description,
                self.done - self.initial,
                self.unit,
                duration(time.perf_counter() - self.start),
            )


class Steps:
    """The stages of one command, one after the other (`exchange.evaluate`): `steps(what)` ends the
    running stage and starts `what`, `close()` ends the last. INFO lines, when `enabled`:
    `[name k/n] what` when a stage starts and `[name k/n] what: done in X` when it ends."""

    def __init__(self, name: str, total: int, *, enabled: bool = True):
        self.name, self.total, self.enabled = name, int(total), enabled
        self.index, self.what, self.start = 0, None, None

    def __call__(self, what: str) -> None:
        self.close()
        self.index, self.what, self.start = self.index + 1, what, time.perf_counter()
        if self.enabled:
            absl_logging.info("[%s %d/%d] %s", self.name, self.index, self.total, what)

    def close(self) -> None:
        if self.what is not None and self.enabled:
            absl_logging.info(
                "[%s %d/%d] %s: done in %s",
                self.name,
                self.index,
                self.total,
                self.what,
                duration(time.perf_counter() - self.start),
            )
        self.what = None


class StudyProgress:
    """Progress over a whole sweep of `pairs` (task, sampler) pairs and `total` configurations,
    `done` of them already on disk.

    One INFO line per pair when it starts, and per chunk it finishes (on a terminal) or when
    its last chunk finishes (`interactive()` false: CI, a log file):
    `[pair k/n] task / sampler: i/m configurations | study d/N | compile X, run Y[, S T] | ETA Z`
    (compile, run and every other stage S: the study's totals so far). The other stages are
    timed with `stage` (a line when one starts and one when it ends) or `add`: building a
    task's reference, training a pair's networks, storing a pair's samples.
    The ETA counts the configurations left at the mean run time per configuration so far, one
    compilation (at the mean compile time so far) for every pair still to start, and every
    other stage at its mean time so far for each time it still has to run.
    """

    def __init__(self, pairs: int, total: int, done: int = 0, *, enabled: bool = True):
        self.pairs, self.total, self.done, self.enabled = int(pairs), int(total), int(done), enabled
        self.pair_index, self.compile_s, self.run_s, self.compiled, self.ran = 0, 0.0, 0.0, 0, 0
        self.label, self.pair_todo, self.pair_done = "", 0, 0
        self.stages: dict[str, list] = {}  # name -> [seconds so far, times done, times in the study]

    def add(self, name: str, seconds: float, *, of: int) -> None:
        """Count one run of stage `name` that took `seconds`; it runs `of` times in the whole study."""
        entry = self.stages.setdefault(name, [0.0, 0, int(of)])
        entry[0] += float(seconds)
        entry[1] += 1

    @contextlib.contextmanager
    def stage(self, name: str, what: str, *, of: int):
        """Time stage `name` of the current pair (`add`), with a line when it starts and one when it ends:
        `[pair k/n] task / sampler: <what>` and `... : <name> in X | study d/N | ETA Z`."""
        if self.enabled:
            absl_logging.info("[pair %d/%d] %s: %s", self.pair_index, self.pairs, self.label, what)
        start = time.perf_counter()
        yield
        seconds = time.perf_counter() - start
        self.add(name, seconds, of=of)
        if self.enabled:
            absl_logging.info(
                "[pair %d/%d] %s: %s in %s | study %d/%d | ETA %s",
                self.pair_index,
                self.pairs,
                self.label,
                name,
                duration(seconds),
                self.done,
                self.total,
                self.eta(),
            )

    def start_pair(self, label: str, todo: int, size: int) -> None:
        self.pair_index += 1
        self.label, self.pair_todo, self.pair_done = label, int(todo), 0
        if self.enabled:
            what = f"{todo} of {size} configurations to run" if todo else f"all {size} configurations on disk"
            absl_logging.info("[pair %d/%d] %s: %s", self.pair_index, self.pairs, label, what)

    def chunk(self, done: int, compile_s: float, run_s: float) -> None:
        """`done` configurations of this pair finished so far; this chunk's `compile_s` (0 after the
        first) and `run_s` (its wall time)."""
        new = int(done) - self.pair_done
        self.pair_done, self.done = int(done), self.done + new
        if compile_s > 0:
            self.compile_s, self.compiled = self.compile_s + compile_s, self.compiled + 1
        self.run_s, self.ran = self.run_s + run_s, self.ran + new
        if self.enabled and (self.pair_done >= self.pair_todo or interactive()):
            others = "".join(f", {name} {duration(s)}" for name, (s, _, _) in self.stages.items() if s >= 0.5)
            absl_logging.info(
                "[pair %d/%d] %s: %d/%d configurations | study %d/%d | compile %s, run %s%s | ETA %s",
                self.pair_index,
                self.pairs,
                self.label,
                self.pair_done,
                self.pair_todo,
                self.done,
                self.total,
                duration(self.compile_s),
                duration(self.run_s),
                others,
                self.eta(),
            )

    def eta(self) -> str:
        if not self.ran:
            return "unknown"
        left = self.run_s / self.ran * (self.total - self.done)
        if self.compiled:
            left += self.compile_s / self.compiled * (self.pairs - self.pair_index)
        for seconds, times, of in self.stages.values():
            left += seconds / times * max(of - times, 0)
        return duration(left)


def define_plugins_flag():
    """The entry points' ``--plugins=mod1,mod2`` absl flag (call once, at module level): modules
    registering out-of-tree entries (`posteriorjax.plugins.load`). Defined here, not in `plugins`,
    so that an entry point's ``--help`` answers without importing the registries (and JAX)."""
    return flags.DEFINE_list(
        "plugins",
        [],
        "Modules registering out-of-tree samplers, tasks, metrics, network kinds or reference methods "
        "(comma-separated; posteriorjax.plugins).",
    )
