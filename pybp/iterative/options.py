"""The iterative methods' names and options, checked in one place for every caller
(``pybp.sirt`` and the others, ``pybp.reconstruct(method=...)``, ``pybp reconstruct
--method``); an error names the option."""

from __future__ import annotations


from pybp import checks
from pybp.iterative.methods import subset_order
from pybp.iterative.table import ITERATIVE as METHODS
from pybp.iterative.table import OPTION_NAMES, TABLE

__all__ = ["METHODS", "OPTION_NAMES", "STREAM_HINTS", "check_options", "relaxation",
           "subset_order", "weight"]

# Options of the methods' own calls (pybp.sirt and the others) that pybp.reconstruct has
# no place for, and TIGRE's name for the iterations: what to do instead
STREAM_HINTS = {
    "x0": "each chunk's method starts at zero; pybp.sirt and the others take x0",
    "mask": "pybp.sirt and the others take a mask; the stream takes circle=True",
    "callback": "pybp.sirt and the others take a callback; the stream shows progress",
    "niter": "TIGRE's name; pybp's is iterations",
}


def relaxation(value) -> float:
    """SIRT's and SART's step factor, in (0, 2)."""
    value = float(checks.float_array([value], "relaxation", 1)[0])
    if not 0 < value < 2:
        raise ValueError(f"relaxation: expected a number in (0, 2), got {value:g}")
    return value


def weight(value) -> float:
    """TV's weight, a positive number."""
    if value is None:
        raise ValueError("weight: tv needs the weight of its TV term (a positive number)")
    value = float(checks.float_array([value], "weight", 1)[0])
    if not value > 0:
        raise ValueError(f"weight: expected a positive number (the TV term's), got {value:g}")
    return value


def check_options(method: str, iterations, options) -> dict:
    """The options of ``method`` (``nonnegative``, ``relaxation``, ``subsets``,
    ``weight``: as :func:`pybp.sirt` and the others take them), checked, with their
    defaults; an option the method does not take is named."""
    checks.choice("method", method, METHODS)
    checks.positive_int(iterations, "iterations")
    options, defaults = dict(options or {}), TABLE[method].options
    for name in options:
        if name not in defaults:
            raise ValueError(f"{name}: not an option of {method} (its options: "
                             f"{', '.join(defaults) or 'none'})")
    given = {name: options.get(name, default) for name, default in defaults.items()}
    return {name: CHECKS[name](value) for name, value in given.items()}


def _subsets(value):
    return None if value is None else checks.positive_int(value, "subsets")


# Each option's check, by name (the table gives which method takes it, and its default)
CHECKS = {"nonnegative": lambda value: checks.flag(value, "nonnegative"), "relaxation": relaxation, "subsets": _subsets, "weight": weight}
