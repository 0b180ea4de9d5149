"""The compatibility shim for mathematics-dataset 1.0.1 (CATALOG §1.4): its source rewrites, the patched
code paths against the package's own documented invariants, and the scoping of the global seeding.

References: the rewrites on hand-written snippets; ``expand_coefficients`` (patched ``np.object`` and
``itemset``) must expand each coefficient into terms that sum to it; ``coefficients_linear_split``
(patched diophantine import) must return ``a * c1 + b * c2 == coefficients`` (its docstring); Python's
and numpy's global generators must continue exactly as if generation had not happened.
"""

from __future__ import annotations

import importlib.util
import random
import sys

import numpy as np
import pytest

from recombine.errors import UserError
from recombine.tasks import mathematics_compat as compat

POLYNOMIALS = f"{compat.PACKAGE}.sample.polynomials"
COMPOSITION = f"{compat.PACKAGE}.util.composition"


def test_rewrites_turn_the_removed_apis_into_current_ones() -> None:
    snippet = (
        "from sympy.solvers.diophantine import base_solution_linear as solve\n"
        "a = np.empty(shape, dtype=np.object)\n"
        "b = np.zeros(3, dtype=np.object)\nc = np.zeros(3, dtype=np.object)\n"
        "coeffs.itemset(index, value)\n"
        "expanded.itemset(power, coeffs)\n"
    )
    patched = compat.rewrite_source(snippet, compat.REWRITES[POLYNOMIALS], "snippet.py")
    assert patched == (
        "from sympy.solvers.diophantine.diophantine import base_solution_linear as solve\n"
        "a = np.empty(shape, dtype=object)\n"
        "b = np.zeros(3, dtype=object)\nc = np.zeros(3, dtype=object)\n"
        "coeffs[index] = value\n"
        "expanded[power] = coeffs\n"
    )
    with pytest.raises(
        UserError, match=r"snippet\.py: expected 3 occurrence\(s\).*found 1.*mathematics-dataset==1\.0\.1"
    ):
        compat.rewrite_source(
            snippet.replace("b = np.zeros(3, dtype=np.object)\nc = np.zeros(3, dtype=np.object)\n", ""),
            compat.REWRITES[POLYNOMIALS],
            "snippet.py",
        )


def test_the_installed_package_is_loaded_rewritten_and_its_sources_match_exactly() -> None:
    compat.load_package()
    for name, rewrites in compat.REWRITES.items():
        module = sys.modules[name]
        assert getattr(module, compat.PATCHED_FLAG) is True
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.loader is not None
        source = spec.loader.get_source(name)  # type: ignore[attr-defined]
        patched = compat.rewrite_source(source, rewrites, name)  # every rewrite matched its exact count
        assert "np.object" not in patched and ".itemset(" not in patched and "list(allowed)" not in patched
    assert compat.load_package() is sys.modules[compat.PACKAGE]  # idempotent


def test_patched_expand_coefficients_keeps_each_coefficient_as_the_sum_of_its_terms() -> None:
    compat.load_package()
    polynomials = sys.modules[POLYNOMIALS]
    with compat.seeded_generation(5):
        for degrees in ([3], [2, 2], [1, 0, 2]):
            coefficients = polynomials.sample_coefficients(np.array(degrees), entropy=8.0)
            expanded = polynomials.expand_coefficients(coefficients, entropy=6.0)
            assert expanded.dtype == object and expanded.shape == coefficients.shape
            for index in np.ndindex(coefficients.shape):
                assert sum(expanded[index]) == coefficients[index]


def test_patched_linear_split_solves_the_diophantine_equation() -> None:
    compat.load_package()
    polynomials = sys.modules[POLYNOMIALS]
    with compat.seeded_generation(9):
        for coefficients in ([4, -6, 10], [7], [0, 3, 12, -5]):
            a, b, first, second = polynomials.coefficients_linear_split(np.array(coefficients), entropy=9.0)
            assert [a * x + b * y for x, y in zip(first, second, strict=True)] == coefficients


def test_seeded_generation_repeats_and_leaves_the_global_generators_where_they_were() -> None:
    random.seed(123)
    np.random.seed(456)
    expected = (random.random(), np.random.random())
    random.seed(123)
    np.random.seed(456)
    draws = []
    for _ in range(2):
        with compat.seeded_generation(7):
            draws.append((random.random(), np.random.random(), random.randint(0, 10**9)))
    assert draws[0] == draws[1]
    assert (random.random(), np.random.random()) == expected
