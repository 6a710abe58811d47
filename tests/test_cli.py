"""The `posteriorjax` command (`posteriorjax.cli`): help without JAX, one-line user errors.

Each case runs a fresh interpreter (absl's flags are process-global, and the entry points
define flags of the same names); the help and flag-parsing cases never import JAX, so each
takes a fraction of a second.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from posteriorjax import cli

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

# the help of one command, then whether JAX was imported (it must not be)
_HELP = """
import sys
from posteriorjax import cli
try:
    cli.main(["posteriorjax", *sys.argv[1:]])
except SystemExit as e:
    code = e.code
print("EXIT", code, "JAX", "jax" in sys.modules)
"""


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=timeout
    )


@pytest.mark.parametrize("command", [None, *cli.COMMANDS])
def test_help_exits_zero_without_importing_jax(command):
    args = ["--help"] if command is None else [command, "--help"]
    out = _run("-c", _HELP, *args)
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().endswith("EXIT 0 JAX False")
    if command is None:
        assert all(f"  {name} " in out.stdout for name in cli.COMMANDS)
    else:  # the command's docstring and its own flags
        assert "flags:" in out.stdout and f"experiments.{command}:" in out.stdout
        assert "--workdir" in out.stdout


def test_python_m_form_keeps_working_and_help_exits_zero():
    out = _run("-m", "experiments.sweep", "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Run a sweep") and "--dry_run" in out.stdout


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    """A config file that, like the project's, refuses an unknown argument (and imports no JAX)."""
    path = tmp_path_factory.mktemp("cli") / "config.py"
    path.write_text(
        textwrap.dedent(
            """
            import ml_collections

            def get_config(arg=None):
                if arg not in (None, "", "tiny"):
                    raise ValueError(f"config argument: expected '' or 'tiny', got {arg!r}")
                return ml_collections.ConfigDict({"num_cases": 3, "tasks": {"poisson": {"noise_std": 0.1}}})
            """
        )
    )
    return str(path)


ERRORS = {
    "bad flag value": (["--memory_limit_bytes=lots"], "flag --memory_limit_bytes=lots: invalid literal"),
    "bad config value": (["--config.num_cases=abc"], "flag --config.num_cases=abc: invalid literal"),
    "unknown flag": (["--worksdir=/tmp"], "Unknown command line flag 'worksdir'"),
    "missing config file": (["--config=nowhere/config.py"], "flag --config=nowhere/config.py: [Errno 2]"),
    "unknown config argument": ([":huge"], "config argument: expected '' or 'tiny', got 'huge'"),
    "wrong config key": (
        ["--config.num_case=3"],
        "flag --config.num_case: the config has no key 'num_case'; Did you mean \"num_cases\"",
    ),
    "wrong nested config key": (["--config.tasks.darcy.noise_std=1"], "flag --config.tasks.darcy.noise_std:"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_user_error_is_one_line_naming_the_flag(case, config_file):
    extra, expected = ERRORS[case]
    config = f"--config={config_file}"
    if extra[0].startswith(":"):  # the argument after the file name
        config, extra = config + extra[0], []
    elif extra[0].startswith("--config="):
        config, extra = extra[0], []
    out = _run("-m", "posteriorjax", "sweep", config, *extra, "--dry_run")
    assert out.returncode == cli.EXIT_USAGE, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("posteriorjax sweep: error: ") and expected in lines[0], lines[0]


def test_verbosity_one_shows_the_traceback(config_file):
    out = _run("-m", "posteriorjax", "sweep", f"--config={config_file}", "--config.num_case=3", "-v=1")
    assert out.returncode != 0 and "Traceback (most recent call last)" in out.stderr


_RAISES = """
import sys
from posteriorjax import cli

def main(argv):
    raise ValueError("samples: expected an existing file, got 'mine.npz'")

cli.execute(main, ["posteriorjax evaluate", *sys.argv[1:]], doc="A command that fails.")
"""


@pytest.mark.parametrize("verbosity", ["0", "1"])
def test_error_raised_by_a_command_is_one_line_unless_verbose(verbosity):
    out = _run("-c", _RAISES, f"--verbosity={verbosity}")
    if verbosity == "0":
        assert out.returncode == cli.EXIT_USAGE
        assert (
            out.stderr == "posteriorjax evaluate: error: samples: expected an existing file, got 'mine.npz'\n"
        )
    else:
        assert out.returncode == 1 and "Traceback (most recent call last)" in out.stderr
        assert out.stderr.rstrip().endswith("ValueError: samples: expected an existing file, got 'mine.npz'")


def test_unknown_command_and_no_command():
    out = _run("-m", "posteriorjax", "sweeep")
    assert out.returncode == cli.EXIT_USAGE
    assert out.stderr.strip() == (
        "posteriorjax: error: unknown command 'sweeep'; expected one of "
        "sweep, report, studies, export, evaluate, train, reference"
    )
    assert _run("-m", "posteriorjax").returncode == cli.EXIT_USAGE


def test_error_raised_by_a_command_is_one_line(tmp_path):
    """A missing workdir, found only once the command runs (after JAX is imported)."""
    out = _run("-m", "posteriorjax", "report", f"--workdir={tmp_path / 'missing'}")
    assert out.returncode == cli.EXIT_USAGE
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posteriorjax report: error: workdir: "), out.stderr
    assert "results.jsonl does not exist" in lines[0]


def test_error_messages():
    assert cli.error_message(KeyError("poisson")) == "key 'poisson' not found"
    missing = FileNotFoundError(2, "No such file or directory", "/nowhere/x.npz")
    assert cli.error_message(missing) == "No such file or directory: /nowhere/x.npz"
    parse = ValueError(
        "flag --config=c.py:x: Error whilst parsing config file:\n\n  Traceback (most recent call last):\n"
        "    File \"c.py\", line 3\n  ValueError: config argument: expected '', got 'x'\n"
    )
    assert cli.flag_error(parse, []) == "flag --config=c.py:x: config argument: expected '', got 'x'"


def test_sweep_stage_flag_lists_the_sweeps_stages():
    """The --stage choices, spelled out in the entry point (no JAX before parsing), are sweep.STAGES
    (in a process of its own: the entry points define their flags on absl's one global registry)."""
    code = (
        "from experiments import sweep as entry; from posteriorjax import sweep; "
        "print(tuple(entry.flags.FLAGS['stage'].parser.enum_values) == sweep.STAGES)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "True", out.stderr
