"""``--method`` and its options, for both geometries of ``pybp reconstruct``: FBP (FDK
with ``--geometry``) or an iterative method (pybp/iterative/options.py names them and
checks their options)."""

from __future__ import annotations

from pybp.iterative import options

METHODS = ("fbp",) + options.METHODS


def add_options(parser):
    group = parser.add_argument_group("method")
    group.add_argument("--method", choices=METHODS, default="fbp",
                       help="fbp: filtered back-projection (FDK with --geometry); sirt, sart, "
                            "cgls: ASTRA's iterative methods; tv: least squares with total "
                            "variation (--weight); each slice its own problem in parallel "
                            "beam, the whole volume on one device in cone beam")
    group.add_argument("--iterations", type=int, metavar="N",
                       help="iterations of an iterative --method (needed by them; no default)")
    group.add_argument("--nonnegative", action="store_true",
                       help="sirt, sart, tv: keep the values at zero or above")
    group.add_argument("--relaxation", type=float,
                       help="sirt, sart: the step's factor, in (0, 2) (default: 1)")
    group.add_argument("--subsets", type=int,
                       help="sart: subsets of the angles (default: one projection each)")
    group.add_argument("--weight", type=float,
                       help="tv: the weight of the total variation (needed by tv; no default)")


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
    fbp_only = dict(filter="ramp", padding="zero", interpolation="linear", precision="float",
                    slices_per_pass="auto")
    for name, default in fbp_only.items():
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
    open (before the centre search): sart's subsets, at most one per angle; a mistake
    names its flag."""
    if method.get("method") == "sart":
        try:
            options.subset_order(n_angles, method.get("subsets"))
        except ValueError as exc:
            raise ValueError(f"--{exc}") from None
