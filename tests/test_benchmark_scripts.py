"""The benchmark entry point's selection and the prepared accelerator script (syntax, dry run)."""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _benchmark_module():
    spec = importlib.util.spec_from_file_location("benchmark_script", ROOT / "scripts" / "benchmark.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_only_selects_exact_names_then_substrings():
    select = _benchmark_module().select
    available = {"darcy": 0, "pool_darcy_64": 0, "spectral_conv": 0, "spectral_grf": 0, "metrics": 0}
    assert select(["darcy"], available) == ["darcy"]  # an exact name does not pull in pool_darcy_64
    assert select(["spectral", "metrics"], available) == ["spectral_conv", "spectral_grf", "metrics"]
    assert select(["spectral_grf", "spectral"], available) == ["spectral_grf", "spectral_conv"]
    assert select(["nothing"], available) == []


def test_flags_list_and_positional_names(monkeypatch, capsys):
    from absl import app, flags

    module = _benchmark_module()
    monkeypatch.setattr(
        module, "collect", lambda: {"darcy": 0, "spectral_conv": 0, "spectral_grf": 0, "metrics": 0}
    )
    fv = flags.FlagValues()
    module.define_flags(fv)
    for argv in (["--list", "--only=spectral,metrics"], ["--list", "--only", "spectral", "metrics"]):
        fv.unparse_flags()
        module.main(fv(["benchmark.py", *argv]), fv)
        assert capsys.readouterr().out.split() == ["spectral_conv", "spectral_grf", "metrics"]
    fv.unparse_flags()
    with pytest.raises(app.UsageError, match=r"unknown benchmark\(s\) \['nothing'\]"):
        module.main(fv(["benchmark.py", "--list", "--only=darcy,nothing"]), fv)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_check_script_parses():
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu_check.sh")], check=True)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_check_dry_run_finds_every_step():
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run"],
        check=True, capture_output=True, text=True, env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    expected = {"spectral_conv", "spectral_grf", "metrics", "reference_pool", "fundps_full", "sweep"}
    assert expected <= set(out.stdout.split())


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_train_device_script_lists_the_networks_and_refuses_bad_arguments(tmp_path):
    """`scripts/train_device.sh --dry-run CONFIG` lists the config's networks as the sweep would
    train them (none trained in a fresh checkout); bad arguments exit 2 with a usage line."""
    import json

    script = str(ROOT / "scripts" / "train_device.sh")
    subprocess.run(["bash", "-n", script], check=True)
    env = {"PYTHON": sys.executable, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    argv = ["bash", script, "--dry-run", "configs/quickstart.py"]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert rows and {"network", "kind", "model", "parameters", "steps", "trained"} <= set(rows[0])
    assert all(r["parameters"] > 0 and r["steps"] > 0 for r in rows)
    assert all(r["network"].startswith("poisson_fixed/") and not r["trained"] for r in rows)
    for argv, message in ((["--dry-run"], "usage"), (["cfg", str(tmp_path), "soon"], "SECONDS")):
        bad = subprocess.run(["bash", script, *argv], capture_output=True, text=True, env=env)
        assert bad.returncode == 2 and message in bad.stderr


def test_interleaved_timing_runs_each_function_back_to_back(monkeypatch):
    """Warm-up first, then per round each function `calls` times in a row (order of `fns`)."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    from bench import common

    monkeypatch.setattr(common, "SETTLE_SECONDS", 0.0)
    calls = []
    fns = [lambda name=name: calls.append(name) for name in "ab"]
    times = common.best_times_interleaved(fns, repeats=2, warmup=1, calls=2)
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] * 2
    assert len(times) == 2 and all(t >= 0 for t in times)
    rounds = common.times_interleaved(fns, repeats=3, warmup=0, calls=1)
    assert len(rounds) == 3 and all(len(r) == 2 for r in rounds)


def test_peer_benchmark_without_torch_records_nothing(monkeypatch, capsys):
    """`--only peer` without the ``bench`` extra: a line saying why, no records, nothing built."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    from types import SimpleNamespace

    from bench import peer

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    assert peer.import_torch() is None
    monkeypatch.setattr(peer, "_ours", lambda n: pytest.fail("built our side without torch"))
    monkeypatch.setattr(peer, "_ours_ddis", lambda n: pytest.fail("built our side without torch"))
    assert peer.bench_peer(SimpleNamespace(device=False)) == []
    assert peer.bench_peer_ddis(SimpleNamespace(device=False)) == []
    assert peer.bench_peer_sweep(SimpleNamespace(device=False)) == []
    out = capsys.readouterr().out
    for name in ("peer_fundps", "peer_ddis", "peer_sweep"):
        assert f"{name}: skipped (torch and neuraloperator not installed" in out
    script = _benchmark_module()
    assert script.select(["peer"], script.collect()) == ["peer_ddis", "peer_fundps", "peer_sweep"]


def test_peer_compiled_reports_xla_flops(monkeypatch):
    """`compiled` returns the program and XLA's FLOP count (2 n^3 for an n x n matrix product),
    with the network's parameters as arguments of the program and the rest compiled in."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    from bench import peer

    class Holder(eqx.Module):
        net: jax.Array
        scale: jax.Array

    module = Holder(2.0 * jnp.eye(8), jnp.ones(()))
    program, flops = peer.compiled(lambda m, a: (m.net @ a) * m.scale, module, jnp.eye(8))
    assert flops >= 2 * 8**3
    assert float(program(jnp.eye(8))[3, 3]) == 2.0
    (arguments,) = program.args
    assert arguments.net is module.net and arguments.scale is None


def test_fno_pad_benchmark_baseline_is_the_full_grid_form(monkeypatch):
    """`nn_fno_pad`'s baseline computes what the network computes, on the whole padded grid."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import jax.random as jr
    import numpy as np
    from bench import nn as bench_nn

    from posteriorjax import nn

    net = nn.get("fno_pad", jr.key(0), in_channels=1, out_channels=1, modes=4, width=4, layers=2)
    x = jr.normal(jr.key(1), (1, 8, 8))
    np.testing.assert_allclose(bench_nn._fno_pad_full_grid(net, x), net(x), rtol=1e-5, atol=1e-6)
    assert "nn_fno_pad" in _benchmark_module().collect()


def test_uno_spectral_benchmark_fixes_each_programs_path(monkeypatch):
    """`nn_uno_spectral` compiles one program per `TuckerSpectralConv` path: FFTs in the FFT one
    only, the same numbers, and the layer's own path choice back afterwards."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import jax.random as jr
    import numpy as np
    from bench import nn as bench_nn

    from posteriorjax.nn import ddpmpp

    call = ddpmpp.TuckerSpectralConv.__call__
    conv = ddpmpp.TuckerSpectralConv(2, 2, (4, 4), 0.5, key=jr.key(0))
    x = jr.normal(jr.key(1), (2, 8, 8))
    apply = lambda c, v: c(v)  # noqa: E731  (one function for both programs)
    programs = {p: bench_nn._compiled_on_path(apply, p, conv, x) for p in ("fft", "matmul")}
    assert [bench_nn._fft_ops(programs[p]) for p in ("fft", "matmul")] == [2, 0]  # rfft2, irfft2
    np.testing.assert_allclose(programs["matmul"](conv, x), programs["fft"](conv, x), rtol=1e-5, atol=1e-6)
    assert ddpmpp.TuckerSpectralConv.__call__ is call
    assert "nn_uno_spectral" in _benchmark_module().collect()
