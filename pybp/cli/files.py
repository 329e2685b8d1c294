"""``pybp reconstruct``, ``pybp center`` and ``pybp preview``: from projection files to
slices on disk (pybp/io), with the axis found (pybp/parallel/centre.py)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from pybp import __version__, distributed, registry
from pybp.stages.filters import FILTERS, PADDINGS
from pybp.io.images import contact_sheet, display_range, label, to_8bit, write_png
from pybp.io.readers import open_scan
from pybp.geometry.parallel import ParallelGeometry
from pybp.io.readers import ANGLE_UNITS
from pybp.io.writers import (
    DTYPES,
    check_output_file,
    check_output_path,
    open_output,
    stored_metadata,
)
from pybp.parallel.params import INTERPOLATIONS, SLICES_PER_PASS, STORAGES
from pybp.api import iterative as api_iterative
from pybp.api.sinograms import Backprojector
from pybp.cl.device import open_device
from pybp.parallel import centre
from pybp.parallel.prepare import RowsTask, Setup
from pybp.parallel.volumes import Reconstructor
from pybp.cli import methods, preprocessing, scans, writing
from pybp.cli.scans import check_cluster, check_counts, cluster, say
from pybp.cli.parser import byte_size

SHEET_TILE = 256  # pixels of one slice on the contact sheet
MAX_SWEEP = 400   # centres one --center-sweep may try (each a PNG)


def _range(text, name, limit):
    """``A:B`` (either end may be left out) within ``0..limit``."""
    try:
        a, b = text.split(":")
        first, stop = int(a) if a else 0, int(b) if b else limit
    except ValueError:
        raise ValueError(f"{name}: expected FIRST:STOP, got {text!r}") from None
    if not 0 <= first < stop <= limit:
        raise ValueError(f"{name}: expected 0 <= FIRST < STOP <= {limit}, got {text!r}")
    return first, stop


def _sweep(text):
    try:
        a, b, step = (float(v) for v in text.split(":"))
    except ValueError:
        raise ValueError(f"center-sweep: expected FIRST:LAST:STEP, got {text!r}") from None
    if not (np.isfinite([a, b, step]).all() and step > 0 and b >= a):
        raise ValueError(f"center-sweep: expected FIRST <= LAST and STEP > 0, got {text!r}")
    count = int((b - a) / step + 1.5)
    if count > MAX_SWEEP:
        raise ValueError(f"center-sweep: {text} is {count} centres, more than {MAX_SWEEP}; "
                         "sweep a narrower range or a larger step (then refine)")
    return a + step * np.arange(count)


def _open(args):
    scan = open_scan(args.input, flats=args.flats, darks=args.darks, angles=args.angles,
                     angle_range=args.angle_range, angle_unit=args.angle_unit)
    n_rows = scan.shape[1]
    rows = _range(args.rows, "rows", n_rows) if args.rows else (0, n_rows)
    return scan, rows


def _estimate(args, scan, rows):
    search = None
    if getattr(args, "center_search", None):
        search = tuple(float(v) for v in _range(args.center_search, "center-search",
                                                 scan.shape[2]))
    tick = time.perf_counter()
    found = centre.estimate_center(scan.projections, scan.angles, scan.flats, scan.darks,
                                   rows, search, log=not args.no_log,
                                   device=getattr(args, "device", None))
    seconds = time.perf_counter() - tick
    vo, refined, cross = found["vo"], found["refined"], found["registration"]
    if refined is None:
        how = (f"Vo's method, rows around {found['row']}; the sample is wider than the "
               "field of view, so not refined by the slice")
    elif abs(refined - vo) > centre.AGREE_PIXELS:
        how = (f"the least negative slice, rows around {found['row']}; Vo's method gave "
               f"{vo:.2f}: they disagree, check with --center-sweep")
    else:
        how = f"Vo's method refined by the least negative slice, rows around {found['row']}"
    text = f"center: {found['center']:.2f} ({how}; {seconds:.1f} s)"
    if cross is not None:
        text += f"; registration of the 0 and 180 degree projections: {cross:.2f}"
        if abs(cross - found["center"]) > centre.DISAGREE_PIXELS:
            text += " (they disagree: check with --center-sweep)"
    return found["center"], text


def cmd_center(args):
    with _open(args)[0] as scan:
        check_counts(args, scan)
        rows = _range(args.rows, "rows", scan.shape[1]) if args.rows else None
        _, text = _estimate(args, scan, rows)
        print(text)
    return 0


def _metadata(args, scan, rows, center, steps, rec):
    n_bins = scan.shape[2]
    digest = writing.sha1(scan.angles)
    return dict(input=str(Path(args.input).resolve()), input_sha1=scan.fingerprint(),
                center=float(center),  # exactly (JSON keeps every bit): resume is bit for bit
                first_row=rows[0], rows=list(rows), angles_sha1=digest, n_angles=scan.shape[0],
                angle_span_degrees=float(np.degrees(np.ptp(scan.angles))),
                **({} if "method" in steps else dict(  # FBP's (steps: an iterative method's)
                    filter=args.filter, padding=args.padding, interpolation=args.interpolation,
                    precision=args.precision, slices_per_pass=args.slices_per_pass)),
                slice_shape=[n_bins, n_bins],
                devices=rec.kernels() if rec is not None else "dask workers",
                log=not args.no_log, command=args.command_line, pybp=__version__,
                source=scan.source, **({"circle": True} if args.circle else {}),
                # chunks of a grid the chunk size and the memory limit set, where phase
                # retrieval reaches across rows
                **({"chunk_slices": args.chunk_slices, "memory_limit": args.memory_limit}
                   if steps["phase"] else {}),
                **{key: value for key, value in steps.items() if value is not None})


def _center_sweep(args, scan, rows, method):
    """One slice per candidate centre (the middle row), as labelled PNGs and a contact
    sheet in the folder ``args.output``: by FBP, or by the iterative ``method``
    (:func:`methods.chosen`) where one is given, as the volume will be made."""
    folder = Path(args.output)
    candidates = _sweep(args.center_sweep)
    for c in (candidates[0], candidates[-1]):
        ParallelGeometry.create(scan.shape[2], scan.angles, c)  # the axis on the detector
    names = [folder / f"center_{c:.2f}.png" for c in candidates] + [folder / "contact_sheet.png"]
    if not args.overwrite and any(p.exists() for p in names):
        raise FileExistsError(f"output: {folder} already holds a centre sweep; pass --overwrite")
    folder.mkdir(parents=True, exist_ok=True)
    row = (rows[0] + rows[1]) // 2
    sinogram = centre.normalised_rows(scan.projections, scan.flats, scan.darks, row, row + 1,
                                      log=not args.no_log)[:, 0].astype(np.float32)
    cl_device, context, _ = open_device(args.device)
    slices = []
    for c in candidates:
        if method:
            geometry = ParallelGeometry(scan.angles, scan.shape[2], center=c, angle_unit="rad")
            slices.append(api_iterative.by_method(method, sinogram, geometry, device=cl_device))
            continue
        with Backprojector(scan.shape[2], scan.angles, center=c, filter=args.filter,
                           padding=args.padding, interpolation=args.interpolation,
                           context=context, angle_unit="rad") as bp:
            slices.append(bp(sinogram))
    low, high = display_range(slices)
    tiles = []
    for c, image, path in zip(candidates, slices, names):
        write_png(path, label(to_8bit(image, low, high), f"c={c:.2f}"), overwrite=True)
        step = max(1, int(np.ceil(image.shape[0] / SHEET_TILE)))
        tiles.append(label(to_8bit(image[::step, ::step], low, high), f"{c:.2f}"))
    write_png(names[-1], contact_sheet(tiles), overwrite=True)
    how = f"{method['method'].upper()}, {method['iterations']} iterations" if method else "FBP"
    print(f"wrote {len(candidates)} slices of row {row} ({how}) for centres "
          f"{candidates[0]:.2f}..{candidates[-1]:.2f} and {names[-1]}")
    return 0


def _center(args, scan, rows, stored):
    """The axis: a number, the one of the run being resumed, or estimated."""
    if args.center != "auto":
        try:
            return float(args.center)
        except ValueError:
            raise ValueError(f"center: expected a number or 'auto', got {args.center!r}") \
                from None
    if stored and "center" in stored:
        say(args, f"center: {stored['center']:.2f} (from the run being resumed)")
        return float(stored["center"])
    center, text = _estimate(args, scan, rows)
    say(args, text)
    return center


def cmd_reconstruct(args):
    """``pybp reconstruct``, run by the kind the arguments pick: the ``--geometry``
    file's, else parallel beam's (:func:`reconstruct`)."""
    return registry.command(registry.for_command(args), "reconstruct")(args)


def reconstruct(args):
    """A parallel-beam scan to its slices. Everything is checked (output, devices,
    scheduler, centre, free space) before the output is made; a run that fails before
    its first slice removes what it made."""
    method = methods.chosen(args)
    inputs = (args.input, args.flats, args.darks, args.angles)
    if not args.center_sweep:
        check_output_path(args.output, args.overwrite, args.resume, inputs)
        check_cluster(args)
    else:
        _sweep(args.center_sweep)
    if args.preview:
        check_output_file(args.preview, args.overwrite, (".png",), "--preview")
    scan, rows = _open(args)
    with scan:
        n_angles, _, n_bins = scan.shape
        say(args, f"input: {scan.source['projections']} ({scan.source['format']}): "
                  f"{n_angles} projections of {scan.shape[1]} x {n_bins}, rows "
                  f"{rows[0]}..{rows[1] - 1}")
        check_counts(args, scan)
        methods.check_for_scan(method, n_angles)
        steps = preprocessing.options(args, n_angles, n_bins)
        if args.center_sweep:
            if steps["rings"] or steps["phase"]:
                say(args, "center sweep: slices without --rings and --phase")
            return _center_sweep(args, scan, rows, method)
        scans.devices(args)
        stored = stored_metadata(args.output) if args.resume else None
        center = _center(args, scan, rows, stored)
        ParallelGeometry.create(n_bins, scan.angles, center)  # the axis on the detector
        n = rows[1] - rows[0]
        if method:
            say(args, f"method: {method['method'].upper()}, {method['iterations']} iterations "
                      "(each slice its own problem)")
            options = dict(filter=None, circle=args.circle, memory_limit=args.memory_limit,
                           **steps, **method)
        else:
            options = dict(filter=args.filter, padding=args.padding,
                           interpolation=args.interpolation, precision=args.precision,
                           slices_per_pass=args.slices_per_pass, circle=args.circle,
                           memory_limit=args.memory_limit, **steps)
        client = cluster(args)
        rec = None
        try:
            # The kernels are built (and verified) before the output is made: what they
            # are is stored with the slices, and --resume refuses others.
            if client is None:
                rec = Reconstructor(n_bins, scan.angles, center, device=args.device,
                                    devices=args.devices, angle_unit="rad", **options)
            metadata = _metadata(args, scan, rows, center, dict(steps, **method), rec)
            output = open_output(args.output, (n, n_bins, n_bins), args.dtype, metadata,
                                 overwrite=args.overwrite, resume=args.resume, inputs=inputs)
            result, code = writing.into(output, n, "slice",
                                        lambda: _run(args, scan, rows, center, options, output,
                                                     client, rec))
            if code is not None:
                return code
            todo, seconds = result
        finally:
            if rec is not None:
                rec.close()
            scans.close_cluster(args, client)
        applications = 2 * method["iterations"] if method else 1  # of A or A^T
        gups = todo * n_bins * n_bins * n_angles * applications / max(seconds, 1e-9) * 1e-9
        scans.report(args, todo, n, "slices",
                     f"{todo} slices of {n_bins} x {n_bins} in {seconds:.1f} s ({gups:.3g} "
                     f"GU/s{' of the operators' if method else ''}, "
                     f"{todo / max(seconds, 1e-9):.1f} slices/s)")
    return 0


def _run(args, scan, rows, center, options, output, client, rec):
    """The slices missing from ``output`` (by ``rec``, a :class:`pybp.Reconstructor`, or
    the workers of ``client``); returns how many were made and the seconds."""
    n = rows[1] - rows[0]
    missing = int((~output.done).sum())
    # the slices missing, no others: the stream grows a run to whole passes itself and
    # writes only its own rows (a resume rewrote slices 0-3 and 8-11 to fill 3 and 9)
    runs = output.remaining(align=1)
    if missing < n:
        say(args, f"resume: {n - missing} of {n} slices are already in {args.output}")
    tick = time.perf_counter()
    for a, b in runs:
        if client is not None:
            _on_cluster(args, client, scan, output, rows, a, b, dict(options, center=center))
            continue
        rec.reconstruct(scan.projections, scan.flats, scan.darks,
                        rows=(rows[0] + a, rows[0] + b), out=output.view(a, b),
                        log=not args.no_log, progress=not args.quiet,
                        chunk_slices=args.chunk_slices)
    seconds = time.perf_counter() - tick
    output.finish()
    return sum(b - a for a, b in runs), seconds


def _on_cluster(args, client, scan, output, rows, a, b, options):
    """Rows ``a..b`` of the output by the workers of ``client``, which open the scan and
    write the TIFF slices themselves."""
    task = RowsTask(Setup.of(scan.shape[2], scan.angles, **options), rows[0] + a, a,
                    not args.no_log, args.chunk_slices)
    try:
        distributed.on_cluster(client, task, rows[0] + a, rows[0] + b,
                               dict(projections=None, flats=None, darks=None,
                                    out=output.writer()),
                               scan=scan.opened_with, progress=not args.quiet)
    finally:
        output.scan_done()


def _input_options(parser):
    group = parser.add_argument_group("input")
    group.add_argument("input", help="HDF5 file (DXchange /exchange/data, or NXtomo found by "
                                     "its NX class; FILE:/ENTRY picks one entry), .npy stack "
                                     "(angles, rows, bins), or a folder or glob of TIFF "
                                     "projections")
    group.add_argument("--flats", help="flat fields: .npy, or a TIFF folder or glob "
                                       "(default: from the HDF5 file)")
    group.add_argument("--darks", help="dark fields, as --flats (default: from the HDF5 file)")
    group.add_argument("--angles", help="text file of angles in degrees, one per projection "
                                        "(default: from the HDF5 file)")
    group.add_argument("--angle-range", type=float, metavar="DEG",
                       help="angles in even steps over DEG degrees from 0, e.g. 180 or 360 "
                            "(default: from the HDF5 file or --angles)")
    group.add_argument("--rows", metavar="A:B", help="detector rows A to B-1 (default: all)")
    group.add_argument("--angle-unit", choices=ANGLE_UNITS,
                       help="unit of --angles, --angle-range and of angles in a file that "
                            "does not say (DXchange's theta, NXtomo without units) "
                            "(default: degrees; a span under 6.3 is then refused as radians)")
    normalised = group.add_mutually_exclusive_group()
    normalised.add_argument("--no-log", action="store_true",
                            help="the data are already normalised line integrals: no "
                                 "flat/dark correction, no -log")
    normalised.add_argument("--normalised", action="store_true",
                            help="without flats and darks: the data are transmissions, "
                                 "flat-field corrected already (-log is taken); needed when "
                                 "their values look like raw counts")


def _center_options(parser):
    parser.add_argument("--center-search", metavar="A:B",
                        help="with --center auto: search the axis between detector columns "
                             "A and B (default: all but 10%% at each edge)")


def _slices_per_pass(text):
    if text == "auto":
        return text
    if text not in {str(n) for n in SLICES_PER_PASS}:
        raise argparse.ArgumentTypeError(f"expected auto or one of {SLICES_PER_PASS}, got {text!r}")
    return int(text)


def add_parsers(sub, common):
    """The commands of files: ``reconstruct`` and ``center``."""
    _add_reconstruct(sub, common)
    cen = sub.add_parser("center", parents=[common], help="estimate the rotation axis of a scan",
                         description="Print the rotation axis of a scan: Vo's Fourier method on "
                                     "the middle rows, and the registration of the 0 and 180 "
                                     "degree projections as a cross-check.")
    _input_options(cen)
    _center_options(cen)
    cen.set_defaults(func=cmd_center, quiet=False)


def _add_reconstruct(sub, common):
    """``pybp reconstruct``: files to slices or a volume on disk."""
    rec = sub.add_parser(
        "reconstruct", parents=[common],
        help="projection files to slices (FBP) or a volume (FDK, --geometry) on disk",
        description="Reconstruct a parallel-beam scan from files to slices on disk by "
                    "filtered back-projection, or a cone-beam scan (--geometry) to the "
                    "planes of its volume by FDK.",
        epilog="""examples:
  pybp reconstruct scan.h5 -o slices/              TIFF slices, axis found (Vo's method)
  pybp reconstruct scan.h5 -o slices/ --resume     finish an interrupted run
  pybp reconstruct scan.h5 -o rec.h5 --rows 100:200 --center 1021.5 --dtype float16
  pybp reconstruct 'proj/*.tif' --flats flats/ --darks darks/ --angle-range 180 -o slices/
  pybp reconstruct scan.h5 -o sweep/ --center-sweep 1015:1025:0.5   pick the axis by eye
  pybp reconstruct scan.h5 -o slices/ --rings sort        stripes (rings) removed
  pybp reconstruct scan.h5 -o slices/ --phase paganin --delta-beta 200 --energy 25 \\
      --distance 0.3 --pixel-size 3e-6                  Paganin phase retrieval
  pybp reconstruct scan.h5 -o slices/ --method sirt --iterations 100 --nonnegative
                                                    SIRT, each slice its own problem
  pybp reconstruct scan.h5 -o slices/ --method tv --iterations 50 --weight 0.01
  pybp reconstruct cone.h5 -o volume/ --geometry cone.json      cone beam, FDK
  pybp reconstruct cone.h5 -o volume/ --geometry cone.json --method cgls --iterations 20

outputs: a folder gets one 32-bit float TIFF per slice, named by detector row
(slice_00042.tif); .h5/.hdf5/.nxs a dataset /slices chunked per slice; .npy one stack.
What the slices are (input, centre, filter, command) is stored with them. An existing
output is never replaced without --overwrite; each slice is written whole (temporary
name, then rename); Ctrl-C stops after the slices in flight; --resume reconstructs only
what is missing. Exit status: 0 done, 2 an error (one line; --debug shows the
traceback), 130 interrupted.""")
    _input_options(rec)
    rec.add_argument("-o", "--output", required=True,
                     help="folder for TIFF slices, or a .h5/.hdf5/.nxs or .npy file")
    rec.add_argument("--center", default="auto",
                     help="rotation axis: detector column, 0-based at the first pixel's centre, "
                          "or 'auto' to estimate it (default: auto)")
    _center_options(rec)
    rec.add_argument("--center-sweep", metavar="A:B:STEP",
                     help="instead of a volume: the middle row for each centre A, A+STEP, .., "
                          "B as PNGs labelled with their centre, and contact_sheet.png, in "
                          "the output folder (default: off)")
    rec.add_argument("--geometry", metavar="CONE.JSON",
                     help="a scan of one whole volume: reconstruct the volume it describes, "
                          "cone beam by FDK (pybp/io/geometry_file.py: a circular orbit, ASTRA "
                          "vectors or projection matrices), parallel rays along any "
                          "direction (laminography: ASTRA parallel3d_vec) by an iterative "
                          "--method; the parallel-beam options do not apply (default: "
                          "parallel beam)")
    _fbp_options(rec)
    preprocessing.add_options(rec)
    methods.add_options(rec)
    rec.add_argument("--dtype", choices=DTYPES, default="float32",
                     help="of the slices on disk; float16 halves the space (default: float32)")
    _run_options(rec)
    rec.add_argument("--overwrite", action="store_true", help="replace an existing output")
    rec.add_argument("--resume", action="store_true",
                     help="finish an interrupted run: reconstruct only the slices missing")
    rec.add_argument("--preview", metavar="PNG",
                     help="also write the middle slice as a PNG (default: none)")
    rec.add_argument("--quiet", action="store_true", help="print errors only")
    rec.set_defaults(func=cmd_reconstruct)


def _fbp_options(rec):
    """Filtered back-projection's options."""
    rec.add_argument("--filter", choices=FILTERS, default="ramp", help="FBP window")
    rec.add_argument("--padding", choices=PADDINGS, default="zero",
                     help="rows padded with zeros, or with their edge values for truncated "
                          "scans (default: zero)")
    rec.add_argument("--interpolation", choices=INTERPOLATIONS, default="linear",
                     help="of the sinogram between detector bins")
    rec.add_argument("--precision", choices=STORAGES, default="float",
                     help="sinograms on the device in float or half (default: float)")
    rec.add_argument("--slices-per-pass", default="auto", type=_slices_per_pass,
                     help=f"sinograms per kernel pass, auto or one of {SLICES_PER_PASS} "
                          "(default: auto)")
    rec.add_argument("--circle", action="store_true",
                     help="zero the pixels outside the reconstruction circle (those some "
                          "projection did not see)")


def _run_options(rec):
    """Where a run goes: its devices, a Dask scheduler, its chunks and memory."""
    which = rec.add_mutually_exclusive_group()
    which.add_argument("--device", default=None,
                       help="index or name substring (see `pybp devices`; default: the fastest)")
    which.add_argument("--devices", metavar="all|I,J,..",
                       help="several devices, each with a pipeline of its own taking the next "
                            "rows as it finishes (cone beam's --method: each iteration shared "
                            "out): all (every GPU) or indices (default: one)")
    rec.add_argument("--scheduler", metavar="ADDRESS|local",
                     help="a Dask scheduler (tcp://host:8786) whose workers reconstruct slabs "
                          "of rows on their GPUs, reading the input and writing TIFF slices "
                          "on a shared file system; local: one worker process per device of "
                          "--devices (else of PYBP_DEVICES or PYBP_DEVICE, else all) (needs "
                          "Dask: pip install distributed; default: none)")
    rec.add_argument("--chunk-slices", type=int, default=None,
                     help="slices per chunk through the device (default: from its memory)")
    rec.add_argument("--memory-limit", type=byte_size, metavar="BYTES",
                     help="the most device memory a run keeps, e.g. 2G (default: 75%% of the "
                          "device's): chunks of slices cut to fit; with --geometry the volume, "
                          "the projections in flight and their filtered store, a larger "
                          "volume going through in slabs of z planes, with the same values")
