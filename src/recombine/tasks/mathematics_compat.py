"""Compatibility shim that makes the PyPI ``mathematics-dataset`` 1.0.1 (Saxton et al., 2019) run today.

CATALOG §1.4; thesis 3.3, 4.3.5, B.3.7. The package was released in 2019 and fails with current numpy
(>= 2) and sympy (>= 1.13, which torch needs) in three places, all in
``mathematics_dataset/sample/polynomials.py``:

1. ``from sympy.solvers.diophantine import base_solution_linear``: the function moved to
   ``sympy.solvers.diophantine.diophantine`` (the import fails, so nothing of the package loads);
2. ``np.object`` (removed in numpy 1.24): replaced by the builtin ``object`` it aliased;
3. ``ndarray.itemset(index, value)`` (removed in numpy 2.0): replaced by ``array[index] = value``.

Two more edits, in ``mathematics_dataset/util/composition.py``, make generation a function of the seed
alone (DESIGN.md: deterministic generators). Without them the same seed gives different questions in
different processes, because Python randomises string and object hashes per process:

4. ``Context.pop`` draws a variable name with ``random.choice(list(allowed))`` from a *set* of letters,
   whose iteration order depends on ``PYTHONHASHSEED``: it draws from ``sorted(allowed)`` instead
   (the same uniform distribution over the same letters);
5. ``expand_entities`` collects the entities of a composed question in a *set* of objects hashed by
   memory address before shuffling them: an insertion-ordered ``dict`` is used instead (same elements).

The fixes are applied by rewriting the two source files on import (each rewrite must match exactly as
often as expected, so a different package version is reported instead of silently mis-patched); neither
numpy nor sympy is modified. The package draws its randomness from the global ``random`` and
``numpy.random`` generators (and sympy's ``sympy.core.random`` for primes): :func:`seeded_generation`
seeds all three for a block of generation and restores their previous states afterwards, so the rest of
the program's global random state is untouched.
"""

from __future__ import annotations

import importlib
import importlib.util
import random
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from recombine.errors import UserError

PACKAGE = "mathematics_dataset"
#: The released version the rewrites below were written for.
PACKAGE_VERSION = "1.0.1"
#: Marks a module of the package whose source this shim has rewritten.
PATCHED_FLAG = "__recombine_compat__"


@dataclass(frozen=True)
class SourceRewrite:
    """Replace ``pattern`` (a regular expression) by ``replacement``, which must match ``count`` times."""

    pattern: str
    replacement: str
    count: int
    reason: str


#: module -> its rewrites, in the order the modules must be loaded (composition imports polynomials).
REWRITES: dict[str, tuple[SourceRewrite, ...]] = {
    f"{PACKAGE}.sample.polynomials": (
        SourceRewrite(
            r"from sympy\.solvers\.diophantine import base_solution_linear",
            "from sympy.solvers.diophantine.diophantine import base_solution_linear",
            1,
            "sympy >= 1.7 moved base_solution_linear into sympy.solvers.diophantine.diophantine",
        ),
        SourceRewrite(r"\bnp\.object\b", "object", 3, "numpy >= 1.24 removed the np.object alias"),
        SourceRewrite(
            r"(\w+)\.itemset\((\w+), (\w+)\)", r"\1[\2] = \3", 2, "numpy >= 2.0 removed ndarray.itemset"
        ),
    ),
    f"{PACKAGE}.util.composition": (
        SourceRewrite(
            r"random\.choice\(list\(allowed\)\)",
            "random.choice(sorted(allowed))",
            1,
            "set-of-strings order depends on PYTHONHASHSEED",
        ),
        SourceRewrite(
            r"entities = set\(context\.child_entities\)",
            "entities = dict.fromkeys(context.child_entities)",
            1,
            "set-of-objects order depends on memory addresses",
        ),
        SourceRewrite(
            r"entities\.add\(maybe_entity\)",
            "entities[maybe_entity] = None",
            1,
            "the set became an insertion-ordered dict",
        ),
    ),
}


def rewrite_source(source: str, rewrites: tuple[SourceRewrite, ...], origin: str) -> str:
    """Apply ``rewrites`` to ``source``; a rewrite that matches an unexpected number of times is an error."""
    for rewrite in rewrites:
        source, found = re.subn(rewrite.pattern, rewrite.replacement, source)
        if found != rewrite.count:
            raise UserError(
                f"{origin}: expected {rewrite.count} occurrence(s) of {rewrite.pattern!r}, found {found}; "
                f"the compatibility shim supports {PACKAGE} {PACKAGE_VERSION} "
                f"(pip install mathematics-dataset=={PACKAGE_VERSION})"
            )
    return source


def _load_rewritten(name: str, rewrites: tuple[SourceRewrite, ...]) -> ModuleType:
    """Import ``name`` from its rewritten source (into the already-loaded module object, if any)."""
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, PATCHED_FLAG, False):
        return loaded
    spec = importlib.util.find_spec(name)  # imports the parent packages
    if spec is None or spec.loader is None or spec.origin is None:
        raise UserError(f"module {name} not found; pip install mathematics-dataset=={PACKAGE_VERSION}")
    source = spec.loader.get_source(name)  # type: ignore[attr-defined]
    if source is None:
        raise UserError(f"no source for {name}; reinstall mathematics-dataset=={PACKAGE_VERSION}")
    code = compile(rewrite_source(source, rewrites, spec.origin), spec.origin, "exec")
    module = loaded if loaded is not None else importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    setattr(module, PATCHED_FLAG, True)
    parent, _, child = name.rpartition(".")
    setattr(sys.modules[parent], child, module)
    return module


def load_package() -> ModuleType:
    """Import ``mathematics_dataset`` with the fixes of the module docstring; returns the package.

    Raises :class:`UserError` (with the install command) when the package is not installed.
    """
    if importlib.util.find_spec(PACKAGE) is None:
        raise UserError(
            f"the Mathematics task needs the PyPI package mathematics-dataset; "
            f"pip install mathematics-dataset=={PACKAGE_VERSION}"
        )
    for name, rewrites in REWRITES.items():
        _load_rewritten(name, rewrites)
    return importlib.import_module(PACKAGE)


def family_module(family: str) -> ModuleType:
    """``mathematics_dataset.modules.<family>`` (``arithmetic``, ``numbers`` ...), loaded via the shim."""
    load_package()
    return importlib.import_module(f"{PACKAGE}.modules.{family}")


@contextmanager
def seeded_generation(seed: int) -> Iterator[None]:
    """Seed the global generators the package draws from; restore their states on exit.

    The package calls ``random.*``, ``numpy.random.*`` and (for primes) sympy's ``sympy.core.random``
    module-level functions; there is no way to hand it a generator, so this is the narrowest scope.
    """
    import sympy.core.random as sympy_random

    python_state = random.getstate()
    numpy_state = np.random.get_state()
    sympy_state = sympy_random.rng.getstate()
    seeds = np.random.SeedSequence(seed).generate_state(3, dtype=np.uint32)
    try:
        random.seed(int(seeds[0]))
        np.random.seed(int(seeds[1]))
        sympy_random.rng.seed(int(seeds[2]))
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        sympy_random.rng.setstate(sympy_state)
