"""``streams.fpmath``: the C library's bits element by element, numpy's special values, and no numpy
transcendental function left in the code that makes records or simulated data."""

import ast
import math
from pathlib import Path

import numpy as np
import pytest

from streams import fpmath

ROOT = Path(__file__).resolve().parents[2]
# numpy functions whose float64 loops numpy picks by CPU (its own SIMD code or SVML with AVX-512)
BY_CPU = {"log", "log2", "log10", "log1p", "exp", "exp2", "expm1", "power", "float_power", "sin", "cos", "tan"}
BY_CPU |= {"arcsin", "arccos", "arctan", "arctan2", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh"}
BY_CPU |= {"cbrt", "hypot", "logaddexp", "logaddexp2"}


def bits(x: object) -> bytes:
    return np.asarray(x, dtype=np.float64).tobytes()


@pytest.mark.parametrize(
    ("ours", "scalar", "inputs"),
    [
        (fpmath.log, math.log, np.exp(np.random.default_rng(1).uniform(-700, 700, 5000))),
        (fpmath.exp, math.exp, np.random.default_rng(2).uniform(-740, 709, 5000)),
        (fpmath.sin, math.sin, np.random.default_rng(3).uniform(-1e3, 1e3, 5000)),
        (fpmath.arcsin, math.asin, np.random.default_rng(4).uniform(-1, 1, 5000)),
    ],
)
def test_each_value_is_the_c_librarys(ours: object, scalar: object, inputs: np.ndarray) -> None:
    assert callable(ours) and callable(scalar)
    assert bits(ours(inputs)) == bits([scalar(v) for v in inputs.tolist()])
    assert bits(ours(inputs.reshape(50, 100))) == bits(ours(inputs))  # (any shape)


def test_power_broadcasts_and_is_the_c_librarys() -> None:
    rng = np.random.default_rng(5)
    base, exponent = rng.uniform(0, 2, (40, 1)), rng.uniform(-8, 8, 30)
    out = fpmath.power(base, exponent)
    assert out.shape == (40, 30)
    assert bits(out) == bits([[math.pow(b, e) for e in exponent.tolist()] for b in base[:, 0].tolist()])
    assert bits(fpmath.power(0.7, np.arange(1.0, 5.0))) == bits([math.pow(0.7, k) for k in range(1, 5)])


def test_special_values_are_numpys() -> None:
    """Where a value is not finite or is zero, it is numpy's (signs included); finite ones are the C
    library's (above)."""
    special = [0.0, -0.0, -1.0, math.inf, -math.inf, math.nan, 5e-324, -5e-324, 1e308, -1e308, 709.9, 0.5]
    special += [2.0, -2.0, 3.0, -3.0]
    cases = [(fpmath.log, np.log, (special,)), (fpmath.exp, np.exp, (special,)), (fpmath.sin, np.sin, (special,))]
    cases += [(fpmath.arcsin, np.arcsin, (special,)), (fpmath.power, np.power, (special, [[v] for v in special]))]
    with np.errstate(all="ignore"):
        for ours, theirs, args in cases:
            a, b = ours(*args), theirs(*args)
            assert a.shape == b.shape and a.dtype == np.float64
            odd = ~np.isfinite(b) | (b == 0)
            assert (np.isnan(a[odd]) == np.isnan(b[odd])).all(), ours
            same = odd & ~np.isnan(b)
            assert (a[same] == b[same]).all() and (np.signbit(a[same]) == np.signbit(b[same])).all(), ours
    assert fpmath.log(3.0).shape == () and fpmath.log(np.empty((2, 0))).shape == (2, 0)


def numpy_calls(source: str, name: str) -> list[str]:
    """``np.<name>`` references in ``source`` to a function numpy picks by CPU, and ``**`` (numpy's power on
    an array) but for a square (numpy squares exactly), a power of two literals or a line that says its
    operands are ``(scalars``."""
    found, lines = [], source.splitlines()
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("np", "numpy"):
            found += [f"{name}:{node.lineno}: np.{node.attr}"] if node.attr in BY_CPU else []
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            literals = isinstance(node.left, ast.Constant) and isinstance(node.right, ast.Constant)
            square = isinstance(node.right, ast.Constant) and node.right.value == 2
            if not (literals or square or "(scalars" in lines[node.lineno - 1]):
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_numpy_transcendental_function_makes_records() -> None:
    sources = sorted((ROOT / "streams").rglob("*.py")) + sorted((ROOT / "audit").rglob("*.py"))
    assert len(sources) > 50
    found = [hit for path in sources for hit in numpy_calls(path.read_text(), str(path.relative_to(ROOT)))]
    assert not found, f"use streams.fpmath (or math for scalars): {found}"
    probe = "y = numpy.exp(x) + np.sqrt(x) * np.log(x)\nz = x**2 + x**3 + 2**31 + phi**lags\nw = 10 ** k  # (scalars)"
    expected = ["probe:1: np.exp", "probe:1: np.log", "probe:2: x ** 3", "probe:2: phi ** lags"]
    assert sorted(numpy_calls(probe, "probe")) == sorted(expected)
