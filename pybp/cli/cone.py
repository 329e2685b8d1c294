"""``pybp reconstruct INPUT -o OUTPUT --geometry cone.json``: a scan of one whole volume
(pybp/registry.py: cone beam, or parallel rays along any direction) from files to the
volume on disk, by FDK or an iterative method, with the same readers, outputs,
``--resume``, progress and Ctrl-C as the parallel-beam command (pybp/cli/files.py)."""

from __future__ import annotations

import sys
import time
from dataclasses import fields
from pathlib import Path

import numpy as np

from pybp import __version__, checks, distributed, phantoms, registry
from pybp.api.cone import ConeBackprojector, fdk
from pybp.cl import cache
from pybp.cl.device import describe, select_device
from pybp.api import iterative as api_iterative
from pybp.api.projector import fits
from pybp.cli import methods, preprocessing, scans, writing
from pybp.cli.preview import sections
from pybp.cli.scans import say
from pybp.cli.writing import EXIT_INTERRUPTED
from pybp.cone import kernels, run
from pybp.cone import volumes as whole_volumes
from pybp.cone.slabs import PLANE_ALIGN
from pybp.cone.params import ConeParams
from pybp.cone.kind import write_circular
from pybp.cone.profiler import default_params
from pybp.geometry.cone import ConeGeometry
from pybp.parallel import speed
from pybp.iterative import table
from pybp.io.demo import cone_circular, cone_scan, write_dxchange
from pybp.io.geometry_file import check_path
from pybp.io.images import SLICE_SUFFIXES, write_png, write_slice
from pybp.io.readers import HDF5_SUFFIXES, open_scan
from pybp.io.writers import check_output_file, check_output_path, open_output, stored_metadata
from pybp.stream.memory import Budget

# Parallel-beam options and their defaults: given with --geometry, they are refused.
PARALLEL_ONLY = {"center": "auto", "center_search": None, "center_sweep": None, "rows": None,
                 "interpolation": "linear", "precision": "float", "slices_per_pass": "auto",
                 "circle": False, "chunk_slices": None}


# The API's names in its errors, as this command's options say them.
API_NAMES = (("memory_limit:", "--memory-limit:"), ("allow more memory", "allow more memory "
             "(--memory-limit)"), ("volume_shape", "volume_shape (in the geometry file)"))


def _as_options(exc: ValueError) -> ValueError:
    text = str(exc)
    for name, option in API_NAMES:
        text = text.replace(name, option)
    return ValueError(text)


def _check_options(args):
    for name, default in PARALLEL_ONLY.items():
        if getattr(args, name, default) != default:
            raise ValueError(f"--{name.replace('_', '-')}: a parallel-beam option, not used "
                             "with --geometry (its file gives the detector and the volume)")


def reconstruct(args):
    """The cone-beam path of ``pybp reconstruct`` (``--geometry``): FDK by :func:`pybp.fdk`
    (the stream of pybp/cone/run.py on one device or several, with ``--rings`` and
    ``--phase``), an iterative method, or either on the workers of ``--scheduler``."""
    _check_options(args)
    method = methods.chosen(args)
    try:
        check_path(args.geometry)
    except ValueError as exc:
        raise ValueError(f"--{exc}") from None
    inputs = (args.input, args.flats, args.darks, args.angles, args.geometry)
    check_output_path(args.output, args.overwrite, args.resume, inputs)
    scans.check_cluster(args)
    if args.preview:
        check_output_file(args.preview, args.overwrite, (".png",), "--preview")
    scan = open_scan(args.input, flats=args.flats, darks=args.darks, angles=args.angles,
                     angle_range=args.angle_range, angle_unit=args.angle_unit)
    with scan:
        n_angles, n_rows, n_cols = scan.shape
        geometry = registry.read_geometry(args.geometry, scan.angles, (n_rows, n_cols))
        kind = registry.kind_of(geometry)
        geometry = kind.command_geometry(geometry)
        if not method and kind.filtered is None:
            raise ValueError(f"--method: {args.geometry} describes {kind.what} (a pybp."
                             f"{kind.name}), which has no filtered back-projection; give an "
                             f"iterative method ({', '.join(table.ITERATIVE)}) and --iterations")
        scans.check_counts(args, scan)
        methods.check_for_scan(method, n_angles)
        steps = preprocessing.options(args, n_angles, n_cols)
        devices = scans.devices(args)  # none with --scheduler: the workers choose theirs
        if method:
            _check_iterative(args)
            _check_state(args)
        described = [describe(d) for d in devices]
        params = default_params(described[0]) if devices else None
        nz, ny, nx = geometry.volume_shape
        say(args, f"input: {scan.source['projections']} ({scan.source['format']}): {n_angles} "
                  f"projections of {n_rows} x {n_cols}; {kind.what} ({args.geometry}) to "
                  f"{nz} x {ny} x {nx} voxels of {geometry.voxel_text()}")
        if args.resume:
            stored_metadata(args.output)  # an output pybp did not make is refused here
        metadata = _metadata(args, scan, geometry, method, steps, described, params)
        # The passes' kernels, buffers and slabs of the whole volume (or the iterative
        # method's working set) are made before the output is: a volume the device
        # cannot take is one line, and nothing is made.
        runner = _PlaneRuns(args, scan, geometry, method, devices, params, steps)
        try:
            runner.client = scans.cluster(args)
            output = open_output(args.output, geometry.volume_shape, args.dtype, metadata,
                                 overwrite=args.overwrite, resume=args.resume, inputs=inputs)

            def work():
                done_before = int(output.done.sum())
                if done_before:
                    say(args, f"resume: {done_before} of {nz} planes are already in "
                              f"{args.output}")
                tick = time.perf_counter()
                runs = output.remaining(align=PLANE_ALIGN)
                for a, b in runs:
                    runner(output, a, b)
                output.finish()
                return sum(b - a for a, b in runs), time.perf_counter() - tick

            result, code = writing.into(output, nz, "plane", work,
                                        kept=lambda: kept_state(args.output))
        finally:
            runner.close()
        if code is not None:
            return code
    _report(args, geometry, kind.filtered, method, *result,
            resumed=runner.iterative.resumed if runner.iterative else 0)
    return 0


def _metadata(args, scan, geometry, method, steps, described, params) -> dict:
    """What the output keeps of the run: everything that changes a voxel's value (the
    volume's grid, as voxel_size and volume_offset are not in the matrices; the
    matrices, the kernels and the steps), for ``--resume`` to check."""
    return dict(input=str(Path(args.input).resolve()), input_sha1=scan.fingerprint(),
                geometry=str(Path(args.geometry).resolve()),
                voxel_size=np.asarray(geometry.voxel_size).tolist(),
                volume_offset=[float(v) for v in geometry.volume_offset],
                matrices_sha1=writing.sha1(geometry.matrices),
                **(method or dict(filter=args.filter, padding=args.padding)),
                log=not args.no_log, command=args.command_line,
                devices=[dict(device=d.identity, name=d.name,
                              kernels=[f"{method['method']}-cone-pair-boxes" if method
                                       else params.key()])
                         for d in described] or "dask workers",
                pybp=__version__, source=scan.source,
                **{key: value for key, value in steps.items() if value is not None})


class _PlaneRuns:
    """Planes ``[a, b)`` of the output (a call), the way this command runs them: the
    iterative method's volume, the workers of ``--scheduler`` (:attr:`client`, set
    once the cluster is up), or :func:`pybp.fdk` on the devices (one or several, with
    rings and phase: the one front door of the API's FDK)."""

    def __init__(self, args, scan, geometry, method, devices, params, steps):
        self.args, self.scan, self.geometry, self.method = args, scan, geometry, method
        self.devices, self.client = devices, None
        self.iterative = None
        self.flats, self.darks = scan.flats, scan.darks
        if self.flats is None and not args.no_log:  # transmissions: -log of the values
            self.flats, self.darks = np.ones(scan.shape[1:], np.float32), None
        self.options = dict(filter=args.filter, padding=args.padding, params=params,
                            memory_limit=args.memory_limit, **steps)
        if method:
            self.iterative = _Iterative(args, scan, geometry, devices, method, self.flats,
                                        self.darks, steps)
        elif devices:  # (the workers of --scheduler check on their own devices)
            _checked(run.check, geometry, [dict(device=d) for d in devices], flats=self.flats,
                     darks=self.darks, **self.options)

    def __call__(self, output, a, b):
        args, scan, geometry = self.args, self.scan, self.geometry
        if self.method:
            output.view(a, b)[0:b - a] = self.iterative.volume()[a:b]
        elif self.client is not None:
            task = run.PlanesTask(geometry, a, offset=a, log=not args.no_log,
                                  options=self.options)
            _checked(distributed.on_cluster, self.client, task, a, b,
                     dict(projections=None, flats=None, darks=None, out=output.writer()),
                     scan=scan.opened_with, progress=not args.quiet)
        else:
            _checked(fdk, scan.projections, geometry, out=output.view(a, b),
                     flats=self.flats, darks=self.darks, devices=self.devices, planes=(a, b),
                     progress=not args.quiet, **self.options)

    def close(self):
        scans.close_cluster(self.args, self.client)


def _report(args, geometry, filtered, method, todo, seconds, resumed=0):
    """The run's last line: planes, method (``filtered``: the kind's filtered
    back-projection), seconds and GUPS (of the operators, for an
    iterative method: 2 applications an iteration, of every plane, of the iterations
    this run made: ``resumed`` were kept by the run it continued)."""
    nz, ny, nx = geometry.volume_shape
    how = f"{method['method'].upper()}, {method['iterations']} iterations" if method else filtered
    if method and resumed:
        how += f", {method['iterations'] - resumed} of them in this run"
    applications = 2 * (method["iterations"] - resumed) if method else 1
    gups = (nz if method else todo) * ny * nx * geometry.n_angles * applications \
        / max(seconds, 1e-9) * 1e-9
    scans.report(args, todo, nz, "planes",
                 f"{todo} planes of {ny} x {nx} by {how} in {seconds:.1f} s ({gups:.3g} GUPS"
                 f"{' of the operators' if method else ''})")


def _check_iterative(args):
    """Cone beam's iterative methods hold the volume and the projections whole on each
    device, in one process: not on a cluster's workers."""
    if args.scheduler:
        raise ValueError(f"--scheduler: cone beam's --method {args.method} holds the whole "
                         "volume on each device of this process; give --devices")


class _Iterative:
    """The volume of cone beam's iterative ``method`` (:func:`chosen`), made once when
    first asked: the scan's line integrals in host memory as FDK's first phase makes them
    on ``devices`` (flats, darks, ``-log``, and ``steps``: rings, phase;
    :func:`pybp.cone.volumes.method`), then :func:`pybp.sirt` or another there, on
    the same devices, its state kept beside the output as it goes (:func:`state_path`).
    A resumed run makes the line integrals again, continues the method from the state
    kept (from the start where none was) and writes what is missing: the same devices
    give the same bits, and so does one of them alone (pybp/iterative/team.py)."""

    def __init__(self, args, scan, geometry, devices, method, flats, darks, steps):
        self.args, self.scan, self.geometry, self.devices = args, scan, geometry, devices
        self.method, self.flats, self.darks, self.steps = dict(method), flats, darks, steps
        self._volume, self.resumed = None, 0
        kind = registry.kind_of(geometry)
        volumes, sets = table.held(method["method"], kind.dims)
        try:  # the working set is checked before the output is made
            for device in map(describe, devices):
                fits(device, *kind.shapes(geometry), volumes=volumes,
                     projections=sets, scratch=kind.scratch_bytes(geometry),
                     what=f"--method {method['method']}",
                     budget=Budget.of(device, args.memory_limit),
                     advice="choose a device with more memory (--device), or a smaller "
                            "volume (volume_shape in the geometry file)")
        except MemoryError as exc:
            raise ValueError(str(exc).replace("memory_limit allows", "--memory-limit allows")) \
                from None

    def volume(self):
        if self._volume is None:
            self.resumed = kept_iterations(self.args.output)  # what this run need not do
            self._volume = _checked(
                whole_volumes.method, api_iterative.by_method, self.method, self.scan.projections,
                self.geometry,
                flats=self.flats, darks=self.darks, devices=self.devices,
                memory_limit=self.args.memory_limit, progress=not self.args.quiet,
                checkpoint=state_path(self.args.output), **self.steps)
        return self._volume


def state_path(output) -> Path:
    """Where cone beam's iterative run keeps its state (pybp/iterative/checkpoint.py):
    beside its output, hidden, until the run is done; ``--resume`` continues from it."""
    output = Path(output)
    return output.with_name(f".{output.name}.pybp-state.npz")


def kept_iterations(output) -> int:
    """The iterations whose state is kept beside ``output`` (0: none)."""
    try:
        with np.load(state_path(output), allow_pickle=False) as kept:
            return int(kept["iteration"]) + 1
    except (OSError, KeyError, ValueError):
        return 0


def kept_state(output) -> str | None:
    """What an interrupted iterative run keeps for ``--resume``, in words, or None."""
    done = kept_iterations(output)
    return f"the state after iteration {done} is kept in {state_path(output)}" if done \
        else None


def _check_state(args):
    """An interrupted run's state beside the output is continued by ``--resume`` and
    removed by ``--overwrite``; a fresh run beside one is refused, not run over it."""
    kept = state_path(args.output)
    if not kept.exists() or args.resume:
        return
    if args.overwrite:
        kept.unlink()
        return
    raise ValueError(f"--resume: {kept} holds the state of an interrupted --method run "
                     "into this output; --resume continues it, --overwrite starts again")


def _checked(call, *args, **kwargs):
    """``call``, its errors in the command's words."""
    try:
        return call(*args, **kwargs)
    except ValueError as exc:
        raise _as_options(exc) from exc


def demo(args):
    """``pybp demo --cone``: FDK of the 3-D phantom's exact line integrals on the device,
    its speed and error, and the middle plane as an image; with ``--write-scan``, the
    scan as DXchange counts and its ``cone.json`` instead."""
    n = args.size or 128
    samples = (args.angles or 2 * n) * n * (n + n // 4)
    # about 40 bytes a detector sample (line integrals, counts, noise); the phantom's
    # volume, sampled 8 times a voxel, about 200 bytes a voxel
    checks.check_demo_memory(40 * samples + (0 if args.write_scan else 200 * n ** 3),
                             f"a cone-beam {'scan' if args.write_scan else 'demo'} of {n}^3")
    if args.write_scan:
        path = Path(args.write_scan)
        geometry_path = path.with_name(path.stem + "-cone.json")
        check_output_file(path, args.overwrite, HDF5_SUFFIXES, "--write-scan")
        check_output_file(geometry_path, args.overwrite, (".json",), "--write-scan")
        geometry, degrees, projections, flats, darks, scale = cone_scan(n, args.angles)
        write_dxchange(path, projections, flats, darks, degrees, overwrite=args.overwrite)
        circular = cone_circular(n)
        del circular["detector_shape"]
        write_circular(geometry_path, **circular)
        print(f"wrote {path}: DXchange cone-beam scan of the 3-D Shepp-Logan phantom, "
              f"{len(degrees)} projections over 360 degrees of {projections.shape[1]} x "
              f"{projections.shape[2]} (uint16), {len(flats)} flats and darks; the volume is "
              f"the phantom times {scale:.4g} per mm")
        print(f"wrote {geometry_path}: its circular orbit and a {n}^3 volume")
        print(f"next: pybp reconstruct {path} -o {path.stem}-volume --geometry {geometry_path}")
        return 0
    args.output = args.output or "pybp-demo-cone.png"
    check_output_file(args.output, args.overwrite, SLICE_SUFFIXES)  # before any work
    if args.device is None:
        speed.choose_cpu_runtime()  # where several CPU runtimes work: the fastest here
    device = select_device(args.device)
    angles = np.deg2rad(np.arange(args.angles or 2 * n) * (360.0 / (args.angles or 2 * n)))
    geometry = ConeGeometry.circular(angles, **cone_circular(n))
    # the phantom is made on the host, before the device's part (128^3: 3 s of line
    # integrals and 2 s of volume here, against 1.4 s of FDK): said, not left silent
    print(f"pybp demo: making the phantom's {len(angles)} projections and its {n}^3 volume "
          "on the host ...", file=sys.stderr, flush=True)
    try:
        projections = phantoms.shepp_logan_cone(geometry).astype(np.float32)
        tick = time.perf_counter()
        with ConeBackprojector(geometry, filter=args.filter, device=device) as bp:
            setup = time.perf_counter() - tick
            if bp.device.type == "gpu":  # a warm-up: the first call maps the staging
                bp(projections)
            tick = time.perf_counter()
            volume = bp(projections)
            seconds = time.perf_counter() - tick
        phantom = phantoms.shepp_logan_cone_volume(geometry)
    except KeyboardInterrupt:
        print("pybp demo: interrupted; nothing was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    error = float(np.sqrt(np.mean((volume - phantom) ** 2)))
    print(f"device:  {bp.device.name} ({bp.device.platform})")
    print(f"kernel:  {bp.params.key()}")
    print(f"case:    3-D Shepp-Logan phantom, {len(angles)} cone-beam projections of "
          f"{geometry.detector_shape[0]} x {geometry.detector_shape[1]} over 360 degrees -> "
          f"{n}^3, FDK with the {args.filter} filter")
    print(f"speed:   {geometry.updates() / seconds * 1e-9:.3g} GUPS, projections in memory to "
          f"volume in memory ({seconds * 1e3:.0f} ms; set-up {setup:.2f} s)")
    print(f"error:   RMS {error:.4f} against the phantom (values 0..1)")
    if Path(args.output).suffix.lower() == ".png":  # a picture: three sections, y and z up
        path = write_png(args.output, sections(volume), overwrite=args.overwrite)
        print(f"picture: the middle z, y and x planes written to {path}")
    else:  # values: the middle z plane as it is
        path = write_slice(args.output, volume[n // 2], overwrite=args.overwrite)
        print(f"plane:   the middle z plane written to {path}")
    return 0


def cone_params(pairs):
    """``KEY=VALUE`` pairs (``group=32x8``) as a :class:`ConeParams`; unknown keys and
    bad values named."""
    known = {f.name: f for f in fields(ConeParams)}
    values = {}
    for pair in pairs or ():
        key, _, value = pair.partition("=")
        if key not in known or not value:
            raise ValueError(f"--set: expected KEY=VALUE with KEY one of {', '.join(known)}, "
                             f"got {pair!r}")
        if key == "group":
            try:
                values[key] = tuple(int(v) for v in value.split("x"))
            except ValueError:
                raise ValueError(f"--set group: expected XxY (32x8), got {value!r}") from None
        elif isinstance(known[key].default, int):
            try:
                values[key] = int(value)
            except ValueError:
                raise ValueError(f"--set {key}: expected an integer, got {value!r}") from None
        else:
            values[key] = value
    return ConeParams(**values)


def render(args):
    """``pybp render --cone``: the cone-beam back-projection's source for ``--set``
    parameters, with the FDK depth weight (``--fdk``) and the shared column of a
    circular orbit (unless ``--tilted``)."""
    params = cone_params(args.set)
    source = kernels.backproject_source(params, args.fdk, not args.tilted)
    if args.output in (None, "-"):
        sys.stdout.write(source)
        return 0
    path = cache.write_text_new(args.output, source, overwrite=args.overwrite)
    print(f"wrote {path} ({params.key()})")
    return 0

