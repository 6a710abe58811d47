"""`rng.normal` is `jax.random.normal` bit for bit, by the unrolled Threefry-2x32 on the CPU."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax import rng


def test_threefry_matches_the_random123_known_answers():
    """Threefry-2x32-20 known-answer vectors of Random123 (kat_vectors: key, counter -> output)."""
    cases = [
        ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
        ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
        ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
    ]
    for key, counter, expected in cases:
        k0, k1, x0, x1 = (jnp.uint32(v) for v in (*key, *counter))
        out = rng.threefry2x32(k0, k1, x0, x1)
        assert tuple(int(v) for v in out) == expected


@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 1, 7, 9), (32, 1, 64, 64)])
@pytest.mark.parametrize("raw", [False, True], ids=["typed-key", "raw-key"])
def test_normal_equals_jax_random_normal(shape, raw):
    key = jr.PRNGKey(11) if raw else jr.key(11)
    ours = jax.jit(lambda k: rng.normal(k, shape))(key)
    theirs = jr.normal(key, shape)
    assert ours.dtype == theirs.dtype == jnp.float32 and ours.shape == shape
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_normal_equals_jax_random_normal_vmapped_and_in_float64():
    keys = jr.split(jr.key(5), 6)
    ours = jax.vmap(lambda k: rng.normal(k, (2, 5, 3)))(keys)
    np.testing.assert_array_equal(
        np.asarray(ours), np.asarray(jax.vmap(lambda k: jr.normal(k, (2, 5, 3)))(keys))
    )
    with jax.enable_x64(True):
        for dtype in (None, jnp.float64, jnp.float32):
            ours, theirs = rng.normal(jr.key(2), (4, 33), dtype), jr.normal(jr.key(2), (4, 33), dtype)
            assert ours.dtype == theirs.dtype
            np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_cpu_draw_uses_the_unrolled_hash_and_other_cases_fall_back():
    def primitives(jaxpr):  # the primitives of `jaxpr` and of the jaxprs nested in it
        used = set()
        for e in jaxpr.eqns:
            used.add(e.primitive.name)
            for value in e.params.values():
                inner = getattr(value, "jaxpr", value)
                if hasattr(inner, "eqns"):
                    used |= primitives(inner)
        return used

    if jax.default_backend() == "cpu":
        jaxpr = jax.make_jaxpr(lambda k: rng.normal(k, (4, 8)))(jr.key(0)).jaxpr
        # one jitted program (an eager call compiles it once per shape), holding the unrolled hash
        assert [e.params.get("name") for e in jaxpr.eqns if e.primitive.name in ("jit", "pjit")] == [
            "_normal_unrolled"
        ]
        used = primitives(jaxpr)
        assert "erf_inv" in used and not used & {"threefry2x32", "random_bits", "while"}
    # no unrolled form for 16-bit floats or other key kinds: jax.random.normal itself, same values
    for key, dtype in [(jr.key(0), jnp.bfloat16), (jr.key(0, impl="rbg"), jnp.float32)]:
        np.testing.assert_array_equal(
            np.asarray(rng.normal(key, (3, 4), dtype), np.float32),
            np.asarray(jr.normal(key, (3, 4), dtype), np.float32),
        )
    assert rng.normal(jr.key(0), (0, 3)).shape == (0, 3)


def test_normal_rejects_a_bad_shape():
    with pytest.raises(ValueError, match="shape: expected a tuple of non-negative integers"):
        rng.normal(jr.key(0), (3, -1))
    with pytest.raises(TypeError, match="shape: expected a tuple of non-negative integers"):
        rng.normal(jr.key(0), (3, 2.5))
