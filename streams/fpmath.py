"""``log``, ``exp``, ``sin``, ``arcsin`` and ``power`` of arrays with the same bits on every CPU.

numpy picks its float64 loops for these by CPU: with AVX-512 they are its own SIMD code or Intel's SVML, whose
results differ from the C library's in the last bit for a share of inputs (one AVX-512 machine, 10⁶ random
inputs each: ``exp`` 4.6 %, ``arcsin`` 8.4 %, ``power`` 5.3 %, ``log`` 0.014 %; ``sin`` none there). A record
computed from them — or from simulated data made with them — then depends on the machine that computed it:
``bench/fingerprint.py`` gave 19 other record bodies on an AVX-512 machine than on an AVX2 one. These take the C
library's scalar functions (Python's :mod:`math`, the ones numpy itself uses without AVX-512) element by element:
the bits are the C library's (glibc's on Linux) whichever loops numpy would pick. Scalars take :mod:`math`.

Special values (zero, negatives, infinities, NaN) come out as numpy gives them (where the :mod:`math` function
would raise instead), so each drops in for its numpy function. ``tests/unit/test_cpu_independent.py`` runs
scenarios with numpy's AVX-512 loops on and off; ``tests/unit/test_fpmath.py`` keeps numpy's transcendental
functions out of the code that makes records.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from audit import native

F = npt.NDArray[np.float64]


def log(x: npt.ArrayLike) -> F:
    """Natural logarithm (of 0: ``-inf``; of a negative number: NaN)."""
    return _map("log", _log, x)


def exp(x: npt.ArrayLike) -> F:
    return _map("exp", _exp, x)


def sin(x: npt.ArrayLike) -> F:
    return _map("sin", _sin, x)


def arcsin(x: npt.ArrayLike) -> F:
    """Inverse sine (outside [-1, 1]: NaN)."""
    return _map("arcsin", _asin, x)


def power(x: npt.ArrayLike, y: npt.ArrayLike) -> F:
    """``x ** y`` element-wise, broadcast (a negative base with a fractional exponent: NaN)."""
    return _map("power", _pow, x, y)


def _map(name: str, scalar: Callable[..., float], *args: npt.ArrayLike) -> F:
    """``scalar`` of each element of ``args`` (broadcast): in the native core when it is built (the same C
    library functions, without a Python call per element)."""
    arrays = [np.asarray(a, dtype=np.float64) for a in args]
    if len(arrays) > 1 and arrays[0].shape != arrays[1].shape:
        if arrays[0].ndim == 0 or arrays[1].ndim == 0:  # (a scalar operand, the usual case: no broadcast's cost)
            shape = arrays[1].shape if arrays[0].ndim == 0 else arrays[0].shape
            arrays = [a if a.shape == shape else np.full(shape, a) for a in arrays]
        else:
            arrays = [np.ascontiguousarray(a) for a in np.broadcast_arrays(*arrays)]
    if native.core is not None and hasattr(native.core, "c_math"):
        flat = [np.ascontiguousarray(a).reshape(-1) for a in arrays]  # (a buffer has a shape: not 0-d)
        out = np.empty(flat[0].size)
        native.core.c_math(name, flat[0], flat[-1], out)
        return out.reshape(arrays[0].shape)
    return python_map(scalar, *arrays)


def python_map(scalar: Callable[..., float], *arrays: F) -> F:
    """:func:`_map`'s definition: Python's :mod:`math` function an element at a time (``arrays``: of one
    shape)."""
    flat = (a.ravel().tolist() for a in arrays)
    return np.fromiter(map(scalar, *flat), np.float64, arrays[0].size).reshape(arrays[0].shape)


# the C library's functions with numpy's answers where they raise instead


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf if x == 0 else math.nan


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _sin(x: float) -> float:
    return math.sin(x) if math.isfinite(x) or math.isnan(x) else math.nan


def _asin(x: float) -> float:
    return math.asin(x) if -1.0 <= x <= 1.0 else math.nan


def _pow(x: float, y: float) -> float:
    try:
        return math.pow(x, y)
    except OverflowError:  # (a negative base to an odd power: -inf)
        return math.copysign(math.inf, x) if _odd(y) else math.inf
    except ValueError:  # a negative base to a fractional power; 0 to a negative one (-0 to an odd: -inf)
        return math.nan if x != 0 else math.copysign(math.inf, x) if _odd(y) else math.inf


def _odd(y: float) -> bool:
    return y.is_integer() and abs(y) % 2 == 1
