"""``--method`` and its options, for both geometries of ``pybp reconstruct``: FBP (FDK
with ``--geometry``) or an iterative method (pybp/iterative/options.py names them and
checks their options)."""

from __future__ import annotations

from pybp.iterative import options
from pybp.iterative.table import TABLE

METHODS = tuple(TABLE)


def _takers(option) -> str:
    """The methods that take ``option``, as the help names them."""
    return ", ".join(name for name, method in TABLE.items() if option in method.options)


def add_options(parser):
    group = parser.add_argument_group("method")
    group.add_argument("--method", choices=METHODS, default="fbp",
                       help="; ".join(f"{m.name}: {m.summary}" for m in TABLE.values())
                       + "; the iterative methods take each slice as its own problem in "
                         "parallel beam, the whole volume on one device in cone beam")
    group.add_argument("--iterations", type=int, metavar="N",
                       help="iterations of an iterative --method (needed by them; no default)")
    group.add_argument("--nonnegative", action="store_true",
                       help=f"{_takers('nonnegative')}: keep the values at zero or above")
    group.add_argument("--relaxation", type=float,
                       help=f"{_takers('relaxation')}: the step's factor, in (0, 2) "
                            f"(default: {TABLE['sirt'].options['relaxation']:g})")
    group.add_argument("--subsets", type=int,
                       help=f"{_takers('subsets')}: subsets of the angles (default: one "
                            "projection each)")
    group.add_argument("--weight", type=float,
                       help=f"{_takers('weight')}: the weight of the total variation (needed; "
                            "no default)")


def chosen(args) -> dict:
    """``method``, ``iterations`` and the method's options as the API takes them (empty
    for fbp), checked; a mistake names its option."""
    given = {name: getattr(args, name) for name in options.OPTION_NAMES
             if getattr(args, name) not in (None, False)}
    if args.method == "fbp":
        stray = (["iterations"] if args.iterations is not None else []) + list(given)
        if stray:
            raise ValueError(f"--{stray[0]}: an option of the iterative methods; give --method "
                             "sirt, sart, cgls or tv")
        return {}
    if args.iterations is None:
        raise ValueError(f"--iterations: needed by --method {args.method}")
    for name, default in TABLE["fbp"].options.items():
        if getattr(args, name, default) != default:
            raise ValueError(f"--{name.replace('_', '-')}: an option of FBP; --method "
                             f"{args.method} takes none")
    try:
        checked = options.check_options(args.method, args.iterations, given)
    except ValueError as exc:
        name, _, rest = str(exc).partition(":")
        raise ValueError(f"--{name}:{rest}") from None
    return dict(method=args.method, iterations=args.iterations, **checked)


def check_for_scan(method: dict, n_angles: int):
    """What of ``method`` (:func:`chosen`) depends on the scan, checked as soon as it is
    open (before the centre search), as the method's row of the table says (sart's
    subsets, at most one per angle); a mistake names its flag."""
    if "method" not in method:
        return
    try:
        TABLE[method["method"]].check_angles(n_angles, method)
    except ValueError as exc:
        raise ValueError(f"--{exc}") from None
