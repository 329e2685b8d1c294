"""The iterative methods' names and options, checked in one place for every caller
(``pybp.sirt`` and the others, ``pybp.reconstruct(method=...)``, ``pybp reconstruct
--method``); an error names the option."""

from __future__ import annotations

import numpy as np

from pybp import checks

METHODS = ("sirt", "sart", "cgls", "tv")
OPTIONS = {"sirt": ("nonnegative", "relaxation"),
           "sart": ("nonnegative", "relaxation", "subsets"),
           "cgls": (), "tv": ("weight", "nonnegative")}
OPTION_NAMES = ("nonnegative", "relaxation", "subsets", "weight")


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


def subset_order(n_angles, subsets) -> list:
    """SART's subsets of ``n_angles`` angles (None: one angle each), subset k holding
    angles k, k + subsets, ..."""
    subsets = n_angles if subsets is None else checks.positive_int(subsets, "subsets")
    if subsets > n_angles:
        raise ValueError(f"subsets: at most one per angle ({n_angles}), got {subsets}")
    return [np.arange(k, n_angles, subsets) for k in range(subsets)]


def check_options(method: str, iterations, options) -> dict:
    """The options of ``method`` (``nonnegative``, ``relaxation``, ``subsets``,
    ``weight``: as :func:`pybp.sirt` and the others take them), checked, with their
    defaults; an option the method does not take is named."""
    checks.choice("method", method, METHODS)
    checks.positive_int(iterations, "iterations")
    options = dict(options or {})
    for name in options:
        if name not in OPTIONS[method]:
            raise ValueError(f"{name}: not an option of {method} (its options: "
                             f"{', '.join(OPTIONS[method]) or 'none'})")
    out = {}
    if "nonnegative" in OPTIONS[method]:
        out["nonnegative"] = bool(options.get("nonnegative", False))
    if "relaxation" in OPTIONS[method]:
        out["relaxation"] = relaxation(options.get("relaxation", 1.0))
    if method == "sart":
        subsets = options.get("subsets")
        out["subsets"] = None if subsets is None else checks.positive_int(subsets, "subsets")
    if method == "tv":
        out["weight"] = weight(options.get("weight"))
    return out
