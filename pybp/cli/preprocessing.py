"""``pybp reconstruct``'s pre-processing options: ``--rings`` (with ``--ring-options``)
and ``--phase paganin`` (with ``--delta-beta``, ``--energy``, ``--distance``,
``--pixel-size``), turned into the ``rings``, ``ring_options`` and ``phase`` of
:func:`pybp.reconstruct` and checked before any output is made, each error naming the
command-line option."""

from __future__ import annotations

import math

from pybp.stages import rings
from pybp.stages.phase import Paganin

PHASE_METHODS = ("paganin",)
# The options of --phase paganin: (name, unit, help).
PAGANIN_OPTIONS = (("delta_beta", "", "ratio of the refractive index decrement to the "
                                      "absorption index (> 0)"),
                   ("energy", "keV", "photon energy"),
                   ("distance", "m", "sample to detector (cone beam: the effective "
                                     "distance, source to sample times sample to detector "
                                     "over source to detector)"),
                   ("pixel_size", "m", "detector pixel at the sample (cone beam: over the "
                                       "magnification)"))


def add_options(parser):
    group = parser.add_argument_group(
        "pre-processing on the device",
        "Ring removal on the sinograms after -log; Paganin phase retrieval on the "
        "flat-field normalised projections before it.")
    group.add_argument("--rings", choices=rings.METHODS,
                       help="remove stripes (rings): sort (Vo's sorting-based removal) or fw "
                            "(Muench's Fourier-wavelet) (default: none)")
    group.add_argument("--ring-options", metavar="KEY=VALUE,..",
                       help="parameters of --rings: sort: size (21, odd); fw: level (log2 of "
                            "the sinogram's longer side), wavelet (db5), sigma (2), pad (true) "
                            "(default: those)")
    group.add_argument("--phase", choices=PHASE_METHODS,
                       help="phase retrieval before -log; paganin needs the four options "
                            "below (default: none)")
    for name, unit, text in PAGANIN_OPTIONS:
        group.add_argument(f"--{name.replace('_', '-')}", type=float,
                           metavar=unit.upper() or "RATIO",
                           help=f"with --phase paganin: {text}{f', {unit}' if unit else ''} "
                                "(default: none)")
    group.add_argument("--phase-margin", type=int, metavar="ROWS",
                       help="with --phase: detector rows read beyond each chunk's, each side "
                            "(default: from the filter's reach)")


def _value(text):
    """``true``/``false``, a whole number, a number, or the text as it is."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def ring_options(text):
    """``"level=4,wavelet=db5"`` as a dict (None for None)."""
    if text is None:
        return None
    found = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ValueError(f"--ring-options: expected KEY=VALUE[,KEY=VALUE..], got {text!r}")
        found[key.strip()] = _value(value.strip())
    return found


def options(args, n_angles: int, n_bins: int) -> dict:
    """``rings``, ``ring_options`` and ``phase`` for :func:`pybp.reconstruct` from
    ``args``, checked against the scan's shape; a mistake names its option."""
    given = {name: getattr(args, name) for name, _, _ in PAGANIN_OPTIONS}
    margin = args.phase_margin
    if args.phase is None:
        stray = [name for name, value in given.items() if value is not None]
        if stray or margin is not None:
            name = stray[0] if stray else "phase_margin"
            raise ValueError(f"--{name.replace('_', '-')}: an option of --phase paganin; "
                             "give --phase paganin too")
        phase = None
    else:
        if args.no_log:
            raise ValueError("--phase: retrieval works on the transmission, before -log; "
                             "--no-log says the data are line integrals already")
        for name, unit, _ in PAGANIN_OPTIONS:
            value, option = given[name], f"--{name.replace('_', '-')}"
            if value is None:
                raise ValueError(f"{option}: needed by --phase paganin"
                                 f"{f' (in {unit})' if unit else ''}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{option}: must be a positive number, got {value:g}")
        if margin is not None and margin < 0:
            raise ValueError(f"--phase-margin: must be a whole number of rows >= 0, got {margin}")
        phase = dict(given, **({} if margin is None else {"margin": margin}))
        Paganin.create(phase)
    chosen = ring_options(args.ring_options)
    if args.rings is None and chosen:
        raise ValueError("--ring-options: given without --rings; add --rings sort or fw")
    try:
        rings.options(args.rings, chosen, n_angles, n_bins)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--ring-options: {str(exc).removeprefix('ring_options: ')}") \
            from None
    return dict(rings=args.rings, ring_options=chosen, phase=phase)
