"""The developers' commands: demo, render, bench and tune, each run by the kind the
arguments pick (pybp/registry.py's ``for_command``: ``--cone``, else parallel beam), and
bench --io, which is no kind's. Loaded only when one of them runs (pybp/cli/commands.py
names them by module), so that ``pybp reconstruct`` does not import the benchmarks, the
tuner and the kinds' command code (0.1 s of its start-up)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from pybp import checks, registry
from pybp.bench import io as bench_io
from pybp.cl.device import device_list
from pybp.io.output import disks
from pybp.io.writers import check_output_file


def cmd_demo(args):
    return registry.command(registry.for_command(args), "demo")(args)


def cmd_render(args):
    if args.output not in (None, "-"):
        check_output_file(args.output, args.overwrite)  # before any work
    return registry.command(registry.for_command(args), "render")(args)


def cmd_bench(args):
    if args.io:
        return _bench_io(args)
    return registry.command(registry.for_command(args), "bench")(args)


def _bench_io(args):
    """``pybp bench --io``: the limits, then the standard cases' bounds on one device
    and on all of them."""
    if args.folder is not None and not Path(args.folder).is_dir():
        raise ValueError(f"--folder: {args.folder} is not a folder")
    if not args.gib > 0:
        raise ValueError(f"--gib: expected a positive size, got {args.gib}")
    if args.json and Path(args.json).exists():
        raise FileExistsError(f"--json: {args.json} exists; give another name (or remove it)")
    size = args.size or 2048
    n_bytes = int(args.gib * 2 ** 30)
    shape = (max(2, n_bytes // (4 * size ** 2)), size, size)
    # before any is timed: the copies' two arrays, the files' volume and its read-back
    checks.check_demo_memory(2 * n_bytes, "copying --gib", "--gib")
    checks.check_demo_memory(8 * int(np.prod(shape, dtype=np.int64)),
                             f"a volume of {shape[0]} slices of {size}^2", "--size")
    bench_io.check_folder(args.folder or tempfile.gettempdir(), 4 * int(np.prod(shape)))
    devices = device_list(args.devices or "all")
    # the files: --gib of the cases' float32 slices (TIFF's cost is a file's, per slice)
    limits = bench_io.measure(devices, args.folder, n_bytes, shape, args.repeats)
    cases = bench_io.standard_cases(size) + (
        bench_io.standard_cases(size, len(devices)) if len(devices) > 1 else [])
    print(bench_io.report(limits, cases))
    folder = args.folder or tempfile.gettempdir()
    kept = bench_io.keep_writers(folder, limits["files"])
    point = disks.mount(folder)[0]
    if kept is not None:
        counts = ", ".join(f"{form} {n}" for form, n in bench_io.writer_counts(
            limits["files"]).items())
        print(f"writer threads kept for outputs under {point}: {counts} ({kept})")
    else:
        print(f"writer threads not kept for {point}: the files were "
              f"{limits['files']['bytes'] / 2 ** 20:.0f} MiB, under "
              f"{bench_io.KEEP_BYTES >> 20} MiB (--gib)")
    if args.json:
        Path(args.json).write_text(json.dumps(limits, indent=1))
        print(f"wrote {args.json}")
    return 0


def cmd_tune(args):
    return registry.command(registry.for_command(args), "tune")(args)
