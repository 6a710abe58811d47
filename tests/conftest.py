"""Test configuration: the one place that sets JAX options for the suite.

The suite runs in float32 (the library default); tests that check numerics to
tight tolerances request the `x64` fixture, which enables float64 locally.

Test programs are small, so compilation dominates the suite's time: XLA's CPU
backend runs at optimization level 0 here (about 2x faster compiles; the
generated code is less optimized, the computation is the same) and emits fusions
with its older LLVM IR emitters instead of the MLIR fusion emitters
(`--xla_cpu_use_fusion_emitters=false`, known to jaxlib 0.8 through 0.10: a third
less time for the fusion-heavy network tests). Benchmarks, and the entry points run
outside the suite, never use these settings.

The persistent compilation cache is on (`parallel.enable_compilation_cache`) in
`$POSTERIORJAX_COMPILATION_CACHE`, else ``~/.cache/posteriorjax/xla-tests`` (``off``
disables it), for every program that takes over 0.1 s to compile: the two
`pytest -n 2` workers and the entry points that tests start as subprocesses (the
variable is exported to them) read what another process compiled, and a rerun reads
what the last run wrote. No size limit: with one, JAX would lock the directory and
scan every entry on each write (quadratic in the suite's thousands of programs). Writes
are plain file writes; a worker that reads an entry the other is still writing fails to
decompress it, which JAX reports as a warning and answers by compiling.
"""

import os
import zlib

os.environ.setdefault("JAX_PLATFORMS", "cpu")
for _flag, _value in (("xla_backend_optimization_level", "0"), ("xla_cpu_use_fusion_emitters", "false")):
    if _flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --{_flag}={_value}").strip()

import jax  # noqa: E402
import jax.random as jr  # noqa: E402
import pytest  # noqa: E402

from posteriorjax import parallel  # noqa: E402

_setting = os.environ.get(parallel.CACHE_VARIABLE, "")
_cache = parallel.enable_compilation_cache(
    _setting or os.path.join(os.path.expanduser("~"), ".cache", "posteriorjax", "xla-tests"),
    min_compile_time_s=0.1,
)
# the same directory (or "off") for the entry points tests start as subprocesses
os.environ[parallel.CACHE_VARIABLE] = "off" if _cache is None else str(_cache)


@pytest.fixture
def key(request):
    """A fresh PRNG key, different per test and reproducible across runs."""
    return jr.key(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def x64():
    """Run the test body with float64 enabled."""
    with jax.enable_x64(True):
        yield


@pytest.fixture
def console_log(monkeypatch):
    """What an entry point shows after `console.setup_logging()` under CI, and the records it dropped."""
    import io
    import logging
    import types

    from absl import logging as absl_logging

    from posteriorjax import console

    monkeypatch.setattr(absl_logging.get_absl_logger(), "filters", [])
    stream, dropped = io.StringIO(), []
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(pathname)s] %(message)s"))
    keep = console._OwnInfoOnly.filter
    monkeypatch.setattr(  # record what the filter drops
        console._OwnInfoOnly, "filter", lambda self, r: keep(self, r) or dropped.append(r.pathname) or False
    )
    monkeypatch.setenv("CI", "true")  # one line per stage
    verbosity = absl_logging.get_verbosity()
    levels = {name: logging.getLogger(name).level for name in console.THIRD_PARTY_LOGGERS}
    logging.getLogger().addHandler(handler)
    console.setup_logging(absl_logging.INFO)
    yield types.SimpleNamespace(stream=stream, dropped=dropped)
    logging.getLogger().removeHandler(handler)
    absl_logging.set_verbosity(verbosity)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
