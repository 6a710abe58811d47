"""The `posteriorjax` command: one subcommand per entry point of `experiments/`.

    posteriorjax sweep --config=configs/quickstart.py --workdir=DIR
    posteriorjax report --workdir=DIR

`posteriorjax <command> [flags]` runs `python -m experiments.<command> [flags]` with the same
flags (`COMMANDS`); the `python -m` form keeps working. Every entry point goes through
`execute`, which gives both forms the same behaviour:

* `--help` (`-h`, `--helpshort`) prints the command's docstring and its own flags and exits 0
  before anything heavy is imported: the entry points import JAX inside `main`, after the flags
  are parsed. `--helpfull` stays absl's (every flag of every module; exit status 1).
* A user error prints one line, `<command>: error: <message>`, naming the flag or config key,
  and exits with status 2: a flag value absl refuses, an unknown or missing flag, a config file
  that cannot be found, a config argument (`--config=file.py:arg`) or override
  (`--config.key=value`) the config refuses, and a ValueError, OSError, KeyError or
  `absl.app.UsageError` raised by the command (a missing file, an unknown task). With
  `--verbosity=1` (or higher) the traceback is shown instead.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Sequence

from posteriorjax import __version__

# subcommand -> (entry-point module, one-line summary)
COMMANDS: dict[str, tuple[str, str]] = {
    "sweep": ("experiments.sweep", "run a study: references, samplers, metrics, tables, figures"),
    "report": ("experiments.report", "redraw a workdir's tables and figures from its records"),
    "studies": ("experiments.studies", "tables and figures of the studies beyond the main table"),
    "export": ("experiments.export", "write a study's cases, truths and references for outside samplers"),
    "evaluate": ("experiments.evaluate", "score samples from a file against a study's references"),
    "train": ("experiments.train", "train a network of a registered kind"),
    "reference": ("experiments.reference", "build prior pools and reference posteriors for one task"),
}
HELP = ("-h", "--help", "-help", "--helpshort", "-helpshort", "-?")
USER_ERRORS = (ValueError, OSError, KeyError)
EXIT_USAGE = 2  # the status of a command-line mistake (as argparse)


def usage() -> str:
    """The top-level help: the subcommands and where each one's flags are described."""
    width = max(map(len, COMMANDS))
    lines = [
        f"posteriorjax {__version__}: is a generative inverse solver sampling its posterior?",
        "",
        "usage: posteriorjax <command> [--flag=value ...]",
        "       posteriorjax <command> --help",
        "",
        "commands (each also runs as `python -m experiments.<command>`):",
        *(f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items()),
        "",
        "--verbosity=1: other libraries' messages, and the traceback of an error",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """The console script: `posteriorjax <command> [flags]` (argv[0] is the program name)."""
    argv = list(sys.argv if argv is None else argv)
    args = argv[1:]
    if not args:
        print(usage(), file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    if args[0] in HELP or args[0] == "help":
        print(usage())
        raise SystemExit(0)
    if args[0] == "--version":
        print(f"posteriorjax {__version__}")
        raise SystemExit(0)
    if args[0] not in COMMANDS:
        _fail("posteriorjax", f"unknown command {args[0]!r}; expected one of {', '.join(COMMANDS)}")
    module = importlib.import_module(COMMANDS[args[0]][0])
    module.entry([f"posteriorjax {args[0]}", *args[1:]])


def execute(
    main: Callable,
    argv: Sequence[str] | None = None,
    *,
    doc: str | None,
    required: Sequence[str] = (),
    reserve_cpu_threads: bool = False,
    compilation_cache: bool = False,
) -> None:
    """Run an absl `main(argv)` as a command: help, one-line user errors, then the JAX set-up.

    `doc`: the command's help text (its module docstring); `required`: flags that must be
    given; `reserve_cpu_threads` / `compilation_cache`: call `parallel.reserve_cpu_threads`
    and `parallel.enable_compilation_cache` after the flags are parsed, before `main` (JAX is
    imported then, not before; neither starts a backend).
    """
    from absl import app, flags
    from absl import logging as absl_logging

    argv = list(sys.argv if argv is None else argv)
    prog = argv[0] if argv[0].startswith("posteriorjax") else f"experiments.{_stem(argv[0])}"
    sys.argv = argv  # ml_collections reads the `--config.key=value` overrides from sys.argv
    args = argv[1 : argv.index("--")] if "--" in argv else argv[1:]
    if any(a in HELP for a in args):
        try:
            print(help_text(prog, doc, main.__module__))
        except BrokenPipeError:  # `posteriorjax sweep --help | head`: nothing more to write
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0)
    if required:
        flags.mark_flags_as_required(list(required))

    def parse(argv: list[str]) -> list[str]:
        try:
            rest = flags.FLAGS(argv)
            _check_config_files()
        except Exception as e:
            if _verbose(argv):
                raise
            _fail(prog, flag_error(e, argv))
        return rest

    def run(argv: list[str]):
        if reserve_cpu_threads or compilation_cache:
            from posteriorjax import parallel  # imports JAX (starts no backend)

            if reserve_cpu_threads:
                parallel.reserve_cpu_threads()  # before JAX starts (several CPU devices; see parallel)
            if compilation_cache:
                parallel.enable_compilation_cache()  # persistent XLA cache (see parallel)
        try:
            return main(argv)
        except (*USER_ERRORS, app.UsageError) as e:
            if absl_logging.get_verbosity() >= 1:  # --verbosity, parsed by now
                raise
            _fail(prog, error_message(e))

    app.run(run, argv=argv, flags_parser=parse)


def help_text(prog: str, doc: str | None, module: str) -> str:
    """`doc`, then the flags the command defines (and `--plugins` where it takes one)."""
    from absl import flags

    by_module = flags.FLAGS.flags_by_module_dict()
    if module == "__main__":  # `python -m experiments.X`: absl keys its flags by the script's path
        path = os.path.abspath(sys.modules["__main__"].__file__)
        module = next((k for k in by_module if os.path.abspath(k) == path), module)
    sections = [flags.FLAGS.module_help(m) for m in (module, "posteriorjax.plugins") if m in by_module]
    return "\n".join(
        [
            (doc or f"usage: {prog} [flags]").strip(),
            "",
            "flags:",
            *(s for s in sections if s.strip()),
            "",
            "  --verbosity: -1 warnings only; 1 other libraries' messages and the traceback of an error",
            "  --helpfull: every flag of every module",
        ]
    )


def flag_error(error: BaseException, argv: Sequence[str]) -> str:
    """One line naming the flag (or config key) of an error raised while parsing `argv`."""
    text = str(error)
    if isinstance(error, KeyError | AttributeError):  # their str() is a repr; ml_collections nests them
        inner = error
        while isinstance(inner, BaseException) and inner.args:
            inner = inner.args[0]
        text = str(inner)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if isinstance(error, KeyError | AttributeError):  # ml_collections: an override of a missing key
        key = re.search(r"'([^']+)'", lines[0] if lines else "")
        hint = "; " + " ".join(lines[1:]) if len(lines) > 1 else ""
        if key:
            flag = _override(argv, key.group(1))
            where = f"flag {flag}" if flag else "config"
            return f"{where}: the config has no key {key.group(1)!r}{hint}"
    if not lines:
        return type(error).__name__
    if len(lines) > 1:  # config_flags: "flag --config=X: Error whilst parsing config file:" + a traceback
        head = re.sub(r"\s*Error whilst parsing config file:?$", "", lines[0])
        last = re.sub(r"^\w+(Error|Exception): ", "", lines[-1])
        return f"{head} {last}"
    return lines[0]


def error_message(error: BaseException) -> str:
    """The message of a user error raised by a command (a file error names the flag holding the path)."""
    if isinstance(error, KeyError) and error.args:
        return f"key {error.args[0]!r} not found"
    if isinstance(error, OSError) and error.filename is not None:
        flag = _flag_holding(str(error.filename))
        reason = error.strerror or str(error)
        return f"{'flag --' + flag + ': ' if flag else ''}{reason}: {error.filename}"
    return str(error).strip() or type(error).__name__


def _check_config_files() -> None:
    """Raise the load error of a given config file now (ml_collections defers it to the first read)."""
    from absl import flags
    from ml_collections import config_flags

    for name, flag in flags.FLAGS._flags().items():  # noqa: SLF001 (absl has no public iterator of flags)
        if not flag.present:
            continue
        try:
            filename = config_flags.get_config_filename(flag)
        except TypeError:  # not a config flag
            continue
        try:
            getattr(flag.value, "__posteriorjax_probe__", None)  # an unloadable file raises OSError
        except OSError as e:
            reason = [line.strip() for line in str(e).splitlines() if line.strip()][-1]
            raise ValueError(f"flag --{name}={filename}: {reason}") from e


def _override(argv: Sequence[str], key: str) -> str | None:
    """The `--<config>.<path>` argument of `argv` whose dotted path contains `key`, as `--config.path`."""
    for arg in argv[1:]:
        match = re.match(r"^--?(?:no)?([\w-]+)\.([\w.-]+)(=|$)", arg)
        if match and key in match.group(2).split("."):
            return f"--{match.group(1)}.{match.group(2)}"
    return None


def _flag_holding(path: str) -> str | None:
    """The name of a given string flag whose value is `path` or a folder above it."""
    from absl import flags

    target = os.path.abspath(path)
    for name, flag in flags.FLAGS._flags().items():  # noqa: SLF001
        if flag.present and isinstance(flag.value, str) and flag.value:
            value = os.path.abspath(flag.value)
            if target == value or target.startswith(value.rstrip(os.sep) + os.sep):
                return name
    return None


def _verbose(argv: Sequence[str]) -> bool:
    """True when `argv` asks for `--verbosity` >= 1 (`-v`, `--v`): read from the arguments, since
    an error while parsing them can come before absl has parsed `--verbosity`."""
    level = 0
    for i, arg in enumerate(argv):
        match = re.match(r"^--?(?:verbosity|v)(?:=(-?\d+))?$", arg)
        if match:
            value = (
                match.group(1) if match.group(1) is not None else (argv[i + 1] if i + 1 < len(argv) else "")
            )
            level = int(value) if re.fullmatch(r"-?\d+", value) else level
    return level >= 1


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _fail(prog: str, message: str) -> None:
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)
