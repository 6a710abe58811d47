"""Run-time checks of traced values that compile to no host callback when a program asks.

`error_if(x, bad, message, value=...)` is the package's check of a traced value (a
hyperparameter's domain, reference weights, a physical input). It returns `x` unchanged;
an error is raised where any element of `bad` is True. How it runs depends on where:

* concrete (eager) inputs: a ValueError at once, naming the offending `value`;
* traced, in a program wrapped by `functionalize`: the failure becomes an *output* of the
  program (JAX's `checkify` carries a flag, a code and the first offending value through
  every `jit`, `vmap`, `scan`, `while`, `cond` and `shard_map` in it), and the host raises
  it with `raise_failure` after the call. Such a program holds no host callback, so the
  persistent compilation cache can store it (JAX never writes an executable that has one);
* traced anywhere else: exactly `eqx.error_if` (a `jax.pure_callback` raising at run time
  under ``EQX_ON_ERROR=raise``, equinox's default, or NaN / off as that variable says).

The choice is made when the program is lowered, not when the check is traced: the check is
one primitive (`check_p`) whose lowering is `eqx.error_if` and whose `checkify` rule is the
functional form, so a jitted helper traced once serves both kinds of caller.

The functional form uses internals of `jax._src.checkify` (the rule table, `update_error`
and the calling convention of its rules); `FUNCTIONAL` is False when they are missing or
checkify calls its rules otherwise (jax 0.11 does), and every check then stays a callback
(the programs still run and raise; they are only not cacheable).
"""

from __future__ import annotations

import functools
import inspect
import zlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir


def _rule_convention_is_known(default_rule) -> bool:
    """Whether checkify calls its rules as `rule(error, enabled_errors, *operands) -> (error, outs)`.

    Read off checkify's own default rule (parameters `primitive, error, enabled_errors, ...`,
    returning `tuple[Error, ...]`), as in jax 0.8-0.10; a JAX that calls its rules otherwise
    keeps every check a host callback rather than being handed arguments in another order.
    """
    sig = inspect.signature(default_rule)
    returns = str(sig.return_annotation).replace(" ", "")
    return list(sig.parameters)[:3] == ["primitive", "error", "enabled_errors"] and returns.startswith(
        "tuple[Error,"
    )


try:  # the functional (callback-free) form needs these internals of jax's checkify
    from jax._src.checkify import FailedCheckError, default_checkify_rule, error_checks, update_error
except ImportError:  # pragma: no cover - another JAX: checks stay host callbacks
    FUNCTIONAL = False
else:
    FUNCTIONAL = _rule_convention_is_known(default_checkify_rule)

_CODE_BASE = 1 << 24  # failure codes stay clear of checkify's own counter (1, 2, ...)


class CheckFailed(ValueError):
    """A run-time check of a traced value failed (raised by `raise_failure`)."""


def _text(message: str, value) -> str:
    if value is None:
        return message
    v = np.asarray(value)
    return f"{message}, got {v.item() if v.ndim == 0 else v!r}"


def _first_bad(bad: np.ndarray, value) -> object:
    if value is None:
        return None
    bad, value = np.broadcast_arrays(np.asarray(bad), np.asarray(value))
    return value.reshape(-1)[int(np.argmax(bad.reshape(-1)))]


def error_if(x, bad, message: str, *, value=None):
    """`x` (any pytree holding at least one array), checked: an error with `message` where `bad`.

    `bad`: a boolean array (an error if any element is True; under `vmap`, if any batch
    element's is); `value`: what to report as the offending value (broadcast against `bad`;
    the first element where `bad` holds is shown as ``"<message>, got <value>"``). Concrete
    inputs raise ValueError here; traced ones are checked at run time (module doc). As with
    `eqx.error_if`, the check runs only if the returned `x` is used.
    """
    leaves, tree = jax.tree.flatten(x)
    if not leaves:
        raise ValueError("x: expected a pytree holding at least one array, got none")
    traced = [v for v in (bad, value, *leaves) if isinstance(v, jax.core.Tracer)]
    if not traced:
        b = np.asarray(bad)
        if b.any():
            raise ValueError(_text(message, _first_bad(b, value)))
        return x
    bad = jnp.asarray(bad, bool)
    operands = [bad]
    if value is not None:
        operands.append(jnp.broadcast_to(jnp.asarray(value), bad.shape))
    out = check_p.bind(
        *operands, *(jnp.asarray(v) for v in leaves), message=message, has_value=value is not None
    )
    return jax.tree.unflatten(tree, out)


# ----------------------------------------------------------------------------
# The primitive: operands (bad, [value], *xs) -> xs

check_p = Primitive("posteriorjax_check")
check_p.multiple_results = True


def _split(operands, has_value):
    k = 1 + has_value
    return operands[0], (operands[1] if has_value else None), list(operands[k:])


@check_p.def_impl
def _impl(*operands, message, has_value):
    bad, value, xs = _split(operands, has_value)
    b = np.asarray(bad)
    if b.any():
        raise ValueError(_text(message, _first_bad(b, None if value is None else np.asarray(value))))
    return xs


@check_p.def_abstract_eval
def _abstract(*avals, message, has_value):
    return list(avals[1 + has_value :])


def _jvp(primals, tangents, *, message, has_value):
    out = check_p.bind(*primals, message=message, has_value=has_value)
    return out, list(tangents[1 + has_value :])


ad.primitive_jvps[check_p] = _jvp


def _batch(args, dims, *, message, has_value):
    k = 1 + has_value
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    head = [batching.bdim_at_front(a, d, size) for a, d in zip(args[:k], dims[:k], strict=True)]
    out = check_p.bind(*head, *args[k:], message=message, has_value=has_value)
    return out, list(dims[k:])


batching.primitive_batchers[check_p] = _batch


def _callback_form(*operands, message, has_value):
    """The lowering outside `functionalize`: `eqx.error_if` (a host callback)."""
    bad, _, xs = _split(operands, has_value)
    return eqx.error_if(xs, jnp.any(bad), message)


mlir.register_lowering(check_p, mlir.lower_fun(_callback_form, multiple_results=True))


def _code(message: str) -> int:
    """A failure code fixed by the message (not by trace order), so the program text -- and its
    persistent-cache key -- is the same in every process."""
    return _CODE_BASE + (zlib.crc32(message.encode()) & 0x3FFFFFFF)


def _functional_rule(error, enabled_errors, *operands, message, has_value):
    if FailedCheckError not in enabled_errors:
        return error, check_p.bind(*operands, message=message, has_value=has_value)
    bad, value, xs = _split(operands, has_value)
    flat = jnp.ravel(bad)
    fmt = message.replace("{", "{{").replace("}", "}}")
    payload = ()
    if value is not None:
        payload = (jnp.ravel(value)[jnp.argmax(flat)],)
        fmt += ", got {}"
    failure = FailedCheckError(None, fmt, *payload)
    leaves, meta = jax.tree.flatten(failure)
    code = _code(message)
    error = update_error(error, jnp.any(flat), code, {code: meta}, leaves, failure.get_effect_type())
    return error, xs


if FUNCTIONAL:
    error_checks[check_p] = _functional_rule


# ----------------------------------------------------------------------------
# Programs


def functionalize(fn):
    """`fn(*args) -> (failure, out)`: `fn` with its `error_if` checks as an output, not callbacks.

    Wrap before `jit`; pass `failure` to `raise_failure` on the host after the call. Under
    `checkify.user_checks` only: no other check (NaN, division, indexing) is added.
    """
    checked = checkify.checkify(fn, errors=checkify.user_checks)

    @functools.wraps(fn)
    def program(*args):
        return checked(*args)

    return program


def failure_message(failure) -> str | None:
    """The message of the first failed check in `failure` (an output of `functionalize`), or None."""
    exc = failure.get_exception()
    if exc is None:
        return None
    mapping = getattr(exc, "error_mapping", None)  # failures per device (shard_map) or batch
    if mapping:
        exc = next(iter(mapping.values()))
    if isinstance(exc, FailedCheckError):
        return exc.fmt_string.format(*(np.asarray(a).item() for a in exc.args))
    return str(exc)


def raise_failure(failure, where: str = "") -> None:
    """Raise `CheckFailed` with the failed check's message (prefixed by `where`), if any failed."""
    message = failure_message(failure)
    if message is not None:
        raise CheckFailed(f"{where}: {message}" if where else message)
