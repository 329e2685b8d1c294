"""pybp: tomographic reconstruction on any OpenCL device: parallel-beam scans by filtered
back-projection or an iterative method (reconstruct --method sirt, sart, cgls, tv),
cone-beam scans (reconstruct --geometry) by FDK or the same methods, laminography by them.

Commands: reconstruct, center, preview, demo, devices, bench, tune, render."""

from __future__ import annotations

import argparse
import importlib
import platform
import shlex
import signal
import sys
import warnings
from dataclasses import fields as dataclass_fields

from pybp import __version__
from pybp import tune as tuning
from pybp.cli import files as cli_files
from pybp.cli import preview, writing
from pybp.cli.parser import Parser, is_expected, one_line
from pybp.cli.writing import EXIT_INTERRUPTED, EXIT_TERMINATED
from pybp.cl.device import devices
from pybp.stages.filters import FILTERS
from pybp.parallel.params import INTERPOLATIONS, KERNELS, SLICES_PER_PASS, STORAGES, AluParams, TextureParams


def tool(name):
    """The command ``name`` of pybp/cli/tools.py, its module imported when it runs."""
    def run(args):
        return getattr(importlib.import_module("pybp.cli.tools"), name)(args)
    run.__name__ = name
    return run


def cmd_devices(args):
    found = devices()
    if not found:
        print("no OpenCL device found; the CPU runtimes (pybp's cpu extra): "
              "`pip install pocl-binary-distribution intel-opencl-rt`")
        return 1
    for d in found:
        print(d.summary() + ("" if d.usable else f": not usable, {d.why_unusable}"))
    return 0


def _render_options(parser):
    """One option per field of the parameter sets, from the dataclasses (pybp/parallel/params.py):
    a field's help and choices are its metadata; the default is the family's."""
    for f in dataclass_fields(AluParams):
        texture, alu = getattr(TextureParams(), f.name, None), getattr(AluParams(), f.name)
        if f.name == "texel_channels":
            default = "slices per pass"
        elif texture is None or texture == alu:
            default = alu if texture is None else texture
        else:
            default = f"{texture}; alu: {alu}"
        where = "" if texture is not None else "alu: "
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=None,
                            choices=f.metadata.get("choices"),
                            help=f"{where}{f.metadata['help']} (default: {default})")


def _detector(text):
    """``ROWSxCOLUMNS``, as the ``--detector`` option takes it."""
    try:
        rows, columns = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ROWSxCOLUMNS (960x1248), got {text!r}") from None
    if rows < 1 or columns < 1:
        raise argparse.ArgumentTypeError(f"expected positive sizes, got {text!r}")
    return rows, columns


def _pitch(text):
    """A positive number, as ``--pitch`` takes it."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of pixels (2.67), got {text!r}") \
            from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _version():
    import pyopencl

    return (f"pybp {__version__} (pyopencl {pyopencl.VERSION_TEXT}, Python "
            f"{platform.python_version()})")


def build_parser():
    parser = Parser(prog="pybp", description=__doc__)
    parser.add_argument("--version", action="version", version=_version())
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true",
                        help="show the traceback of an error instead of one line")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    cli_files.add_parsers(sub, common)
    preview.add_parser(sub, common)

    sub.add_parser("devices", help="list OpenCL devices").set_defaults(func=cmd_devices)
    device_help = ("index or name substring (see `pybp devices`; default: PYBP_DEVICE, "
                   "else the fastest)")

    _add_demo(sub, common, device_help)
    _add_render(sub)
    _add_bench(sub, common, device_help)
    _add_tune(sub, common, device_help)
    return parser


def _add_demo(sub, common, device_help):
    """``pybp demo``: the built-in phantom, or a scan of it to try."""
    demo = sub.add_parser("demo", parents=[common],
                          help="reconstruct the built-in phantom (--cone: by FDK), print "
                               "speed and error")
    demo.add_argument("--size", type=int, default=None,
                      help="detector bins and slice width (default: 512; 256 with --write-scan)")
    demo.add_argument("--angles", type=int, default=None, help="projections (default: size)")
    demo.add_argument("--filter", choices=FILTERS, default="ramp", help="FBP window")
    demo.add_argument("--interpolation", choices=INTERPOLATIONS, default="linear",
                      help="of the sinogram between detector bins")
    demo.add_argument("--precision", choices=STORAGES, default="float",
                      help="sinograms on the device in float or half")
    demo.add_argument("--device", default=None, help=device_help)
    demo.add_argument("--output", default=None,
                      help="the slice: .png, .npy or .tif (default: pybp-demo.png; with --cone "
                           "pybp-demo-cone.png, three sections of the volume)")
    demo.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    demo.add_argument("--write-scan", metavar="FILE.h5",
                      help="instead: write a DXchange scan of the 3-D phantom (size/4 rows, "
                           "flats, darks, noise, axis 3.7 pixels off the middle) to try "
                           "`pybp reconstruct` on (default: off)")
    demo.add_argument("--cone", action="store_true",
                      help="cone beam: FDK of the 3-D phantom (size^3, default 128, from "
                           "2 size projections over 360 degrees); with --write-scan, its scan "
                           "and FILE-cone.json for `pybp reconstruct --geometry`")
    demo.set_defaults(func=tool("cmd_demo"))


def _add_render(sub):
    """``pybp render``: a kernel's OpenCL source."""
    render = sub.add_parser("render", help="write a kernel's OpenCL source",
                            description="Write the OpenCL source of one parameter set: every "
                                        "field of pybp/parallel/params.py is an option.")
    _render_options(render)
    render.add_argument("--cone", action="store_true",
                        help="the cone-beam back-projection instead (pybp/cone/params.py), "
                             "its parameters from --set")
    render.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="with --cone: a parameter, e.g. family=texture, voxels_per_item=16, "
                             "projections_per_pass=16, group=32x8, positions=float "
                             "(default: ConeParams' defaults)")
    render.add_argument("--fdk", action="store_true",
                        help="with --cone: the FDK kernel (samples times 1/w^2)")
    render.add_argument("--tilted", action="store_true",
                        help="with --cone: for any trajectory (no column shared along z)")
    render.add_argument("-o", "--output", default=None, help="file (default: standard output)")
    render.add_argument("--overwrite", action="store_true", help="replace an existing file")
    render.set_defaults(func=tool("cmd_render"))


def _add_bench(sub, common, device_help):
    """``pybp bench``: GU/s of the kernels, the pipeline, the pairs."""
    bench_ = sub.add_parser("bench", parents=[common],
                            help="GU/s of every kernel and setting, beside silx")
    bench_.add_argument("--size", type=int, default=None,
                        help="bins and slice width (default 2048: the paper's case); with "
                             "--cone the volume's edge (default 512)")
    bench_.add_argument("--angles", type=int, default=None, help="projections (default: size)")
    bench_.add_argument("--repeats", type=int, default=5,
                        help="timed calls after a warm-up; the median is shown")
    bench_.add_argument("--device", default=None, help=device_help)
    bench_.add_argument("--kernels", nargs="*", choices=KERNELS,
                        help="kernel families to time (default: all)")
    _setting_options(bench_)
    bench_.add_argument("--no-silx", action="store_true", help="skip the silx yardstick")
    bench_.add_argument("--hybrid-sweep", action="store_true",
                        help="only: GU/s of the hybrid mode for each texture/ALU split")
    bench_.add_argument("--pipeline", action="store_true",
                        help="only: a whole volume from uint16 projections with flats and darks "
                             "in memory to float32 slices in memory, beside the kernel-only "
                             "speed and silx's filtered_backprojection")
    bench_.add_argument("--rows", type=int, default=None,
                        help="with --pipeline: detector rows, i.e. slices (default 2048); with "
                             "--forward or --iterative: slices (default 64)")
    bench_.add_argument("--flats", type=int, default=20,
                        help="with --pipeline: flat and dark frames each")
    bench_.add_argument("--rings", choices=("sort", "fw"),
                        help="with --pipeline: ring removal too, its cost reported beside "
                             "the volume without it (default: none)")
    bench_.add_argument("--phase", action="store_true",
                        help="with --pipeline: Paganin phase retrieval too (delta/beta 200, "
                             "25 keV, 0.3 m, 3 um pixels), its cost reported")
    scan = bench_.add_mutually_exclusive_group()
    scan.add_argument("--cone", action="store_true",
                      help="only: cone-beam FDK on the RabbitCT-like case (GUPS of each "
                           "verified parameter set beside the fetch-only ceiling, then end "
                           "to end from host memory, and in slabs)")
    bench_.add_argument("--projections", type=int, default=None,
                        help="with --cone or --laminography: projections over 360 degrees "
                             "(default 496; with --laminography 512)")
    bench_.add_argument("--detector", type=_detector, default=None, metavar="ROWSxCOLUMNS",
                        help="with --cone or --laminography: the detector (default "
                             "960x1248; with --laminography 768x768)")
    bench_.add_argument("--pitch", type=_pitch, default=None, metavar="PIXELS",
                        help="with --cone or --laminography, and --forward or --iterative: "
                             "a voxel's side in pixels at the isocentre (default: 2.67 at "
                             "--size 512, a 256 mm field; with --laminography 1)")
    scan.add_argument("--laminography", action="store_true",
                      help="with --forward or --iterative: the pair and methods of "
                           "pybp.ParallelVectorGeometry on a laminography scan (the rays 30 "
                           "degrees from a right angle to the axis; --size^3 from "
                           "--projections of --detector)")
    bench_.add_argument("--forward", action="store_true",
                        help="only: the forward projection and its exact transpose "
                             "(pybp.Projector) on device arrays, beside the load ceiling; "
                             "parallel beam: --rows slices of --size^2 from --angles angles "
                             "(default 64 x 2048^2 from 2048, ASTRA's case); with --cone the "
                             "volume of --size^3 from --projections of --detector")
    bench_.add_argument("--iterative", action="store_true",
                        help="only: as --forward, then a SIRT and a CGLS iteration "
                             "(--iterations, the median shown)")
    bench_.add_argument("--iterations", type=int, default=5,
                        help="with --iterative: iterations timed one by one")
    bench_.add_argument("--io", action="store_true",
                        help="only: the limits a run's data meets on this machine (host "
                             "copies by threads, page-locked transfers of each device and of "
                             "all at once, file reads from the page cache and the disk, "
                             ".npy, HDF5 and TIFF writes), and the lower bound they set on "
                             "--size^3 from a DXchange file, parallel and cone beam")
    bench_.add_argument("--devices", default=None, metavar="all|I,J,..",
                        help="with --io: the devices whose transfers to measure (default: "
                             "all)")
    bench_.add_argument("--folder", default=None,
                        help="with --io: where to write and read the files (default: the "
                             "system's temporary folder); a folder on the disk the run "
                             "writes to")
    bench_.add_argument("--gib", type=float, default=1.0,
                        help="with --io: GiB of each host copy and transfer")
    bench_.add_argument("--json", default=None, metavar="FILE",
                        help="with --io: the limits as JSON too, into FILE (tuning scripts "
                             "read them; default: none)")
    bench_.set_defaults(func=tool("cmd_bench"))


def _add_tune(sub, common, device_help):
    """``pybp tune``: a profile of kernel parameters for this device."""
    tune = sub.add_parser(
        "tune", parents=[common], help="search kernel parameters for this device; save a profile",
        description="""Time verified kernel candidates on this device within a budget and save
the fastest of each setting (slices per pass, interpolation, storage) as the device's
profile, which pybp uses from then on. Each setting's current choice is timed first;
when the budget is spent, each setting's fastest candidate is timed again beside it, in
turns, and saved only where it is faster. Ctrl-C keeps the profile as it was.""")
    tune.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                      help="stop starting candidates after this long (default: "
                           f"{tuning.BUDGETS['cpu']:.0f} on a CPU, {tuning.BUDGET:.0f} on a GPU)")
    tune.add_argument("--size", type=int, default=None,
                      help=f"bins and slice width timed (default: {tuning.SIZES['cpu']} on a "
                           f"CPU, {tuning.SIZE} on a GPU)")
    tune.add_argument("--repeats", type=int, default=5,
                      help="timed calls per candidate after a warm-up; the median counts")
    tune.add_argument("--device", default=None, help=device_help)
    tune.add_argument("--families", nargs="*", choices=("texture", "alu"),
                      default=("texture", "alu"), help="kernel families searched")
    _setting_options(tune)
    tune.add_argument("--quiet", action="store_true", help="no progress bar")
    tune.add_argument("--cone", action="store_true",
                      help="instead: the cone-beam FDK kernels (families, voxels per item, "
                           "projections per pass, work-groups; --size: the volume's edge, "
                           "default 256, 64 on a CPU)")
    tune.set_defaults(func=tool("cmd_tune"))


def _setting_options(parser):
    parser.add_argument("--slices", nargs="*", type=int, choices=SLICES_PER_PASS,
                        help="slices per pass (default: all)")
    parser.add_argument("--interpolation", nargs="*", choices=INTERPOLATIONS,
                        help="(default: all)")
    parser.add_argument("--storage", nargs="*", choices=STORAGES,
                        help="texel storage (default: all)")


class _Interrupts:
    """SIGINT noted as well as raised, from the first line of ``main``: an interrupt
    that some library swallowed (raised inside a destructor or a callback) still ends
    the command with status 130 instead of being lost. SIGTERM (a batch system's, or
    ``kill``'s) stops the command as Ctrl-C does, whole files and one line, with status
    143 (128 + 15); it ended it at once, with no message."""

    def __init__(self):
        self.count = 0
        self.terminated = False
        self.previous = {}

    def _handle(self, signum, frame):
        self.count += 1
        self.terminated |= signum == signal.SIGTERM
        raise KeyboardInterrupt

    def __enter__(self):
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                self.previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: Python's own handling
                pass
        return self

    def __exit__(self, *exc):
        for signum, previous in self.previous.items():
            signal.signal(signum, previous)

    def code(self, code):
        """The exit status: 143 where SIGTERM stopped the command."""
        return EXIT_TERMINATED if self.terminated and code == EXIT_INTERRUPTED else code


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    """Warnings as one line for the user, without the file and line of pybp's code (and
    without a second "pybp: " where the warning names pybp for Python's users)."""
    text = str(message)
    text = text[len("pybp: "):] if text.startswith("pybp: ") else text
    print(f"pybp: warning: {text}", file=sys.stderr if file is None else file)


def main(argv=None):
    shown = warnings.showwarning
    warnings.showwarning = _one_line_warning
    with _Interrupts() as interrupts:
        try:
            code = _main(argv)
        except KeyboardInterrupt:
            writing.hold_interrupts()
            code = None
        finally:
            warnings.showwarning = shown
        if code is None:
            print("pybp: interrupted", file=sys.stderr)
            code = EXIT_INTERRUPTED
        elif interrupts.count and code == 0:
            # the command ran to its end (the interrupt came as it ended, or something
            # caught it and went on): say that its output is whole, as it is
            print("pybp: interrupted, but the command had run to its end: its output is "
                  "complete", file=sys.stderr)
            code = EXIT_INTERRUPTED
        return interrupts.code(code)


def _main(argv):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.command_line = shlex.join(["pybp"] + argv)
    for name in ("size", "angles", "repeats", "rows", "flats", "chunk_slices", "budget",
                 "projections"):
        value = getattr(args, name, None)
        if isinstance(value, (int, float)) and value <= 0:
            print(f"pybp {args.command}: --{name.replace('_', '-')} must be positive, got {value}",
                  file=sys.stderr)
            return 2
    try:
        return args.func(args)
    except KeyboardInterrupt:
        writing.hold_interrupts()
        print(f"pybp {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if getattr(args, "debug", False) or not is_expected(exc):
            raise
        print(f"pybp {args.command}: {one_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
