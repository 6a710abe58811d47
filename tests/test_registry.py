"""The one registry shape (`posteriorjax.registry.Registry`) and the five registries built on it."""

import pytest

from posteriorjax import plugins, registry, samplers, tasks, training
from posteriorjax.metrics import registry as metrics
from posteriorjax.reference import registry as references


def test_registry_shape():
    r = registry.Registry("widget", int)
    assert r.register("b", 2) == 2 and r.register("a")(1) == 1  # one call, or a decorator
    assert r.names() == ["b", "a"] and r.get("a") == r["a"] == 1 and "b" in r and len(r) == 2
    assert r.items() == [("b", 2), ("a", 1)] and r.values() == [2, 1]
    with pytest.raises(ValueError, match=r"^name: unknown widget 'c'; expected one of \['b', 'a'\]$"):
        r.get("c")
    with pytest.raises(ValueError, match=r"^name: widget 'a' is already registered$"):
        r.register("a", 3)
    with pytest.raises(TypeError, match=r"^widget 'c': expected int, got str 'x'$"):
        r.register("c", "x")
    with pytest.raises(ValueError, match="name: expected a non-empty string naming the widget, got ''"):
        r.register("", 3)
    r.unregister("a")
    r.unregister("a")  # no-op when absent
    assert r.names() == ["b"]
    callables = registry.Registry("builder", callable)
    with pytest.raises(TypeError, match="builder 'x': expected a callable, got int 3"):
        callables.register("x", 3)


def test_the_five_registries_share_the_shape():
    assert set(plugins.REGISTRIES) == {"sampler", "task", "metric", "network kind", "reference method"}
    assert plugins.REGISTRIES["sampler"] is samplers.REGISTRY and plugins.REGISTRIES["task"] is tasks.REGISTRY
    assert plugins.REGISTRIES["metric"] is metrics.REGISTRY is metrics.METRICS
    assert plugins.REGISTRIES["network kind"] is training.kinds.REGISTRY
    assert plugins.REGISTRIES["reference method"] is references.REGISTRY is references.METHODS
    for what, r in plugins.REGISTRIES.items():
        assert isinstance(r, registry.Registry) and r.what == what and len(r) > 0
        with pytest.raises(ValueError, match=f"unknown {what} 'nope'; expected one of"):
            r.get("nope")
    # the entry's type is checked the same way in each
    for register, bad, what in (
        (lambda: samplers.register("x", 3), "build", "callable"),
        (lambda: tasks.register("x", 3), "task 'x'", "callable"),
        (lambda: metrics.register("m"), "metric", "Metric"),
        (lambda: training.kinds.register("k"), "network kind", "Kind"),
        (lambda: references.register("r", print), "reference method 'r'", "Method"),
    ):
        with pytest.raises(TypeError, match=f"{bad}.*expected.*{what}"):
            register()
    assert "x" not in samplers.REGISTRY and "x" not in tasks.REGISTRY
