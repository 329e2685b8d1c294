"""``pybp bench --io``: the limits a run's data meets on this machine, measured, and the
lower bound they set on a case (issue 53).

The limits:
- host copies: NumPy copies over 1, 2, 4 ... threads (what the readers and writers do
  between the caller's arrays, files and page-locked staging);
- page-locked transfers to and from each device, and to every device at once;
- reads of a file in the page cache, and from the disk (the file's pages dropped first:
  ``posix_fadvise(DONTNEED)`` after ``fsync``, no root needed);
- writes into the page cache (no ``fsync``), and to the disk (``fsync`` timed too):
  one ``.npy``, one HDF5 dataset, and TIFF files of one slice each, as the command
  writes them.

A case's traffic (:class:`Traffic`) is the bytes a run must move: read from its file, through the
host's copies, up and down each device's bus, written; with its kernel time where
known. :func:`bounds` gives the time each limit alone allows, and the largest of them
is the case's lower bound: a run's wall time is reported as that bound over it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyopencl as cl

from pybp.cl import pacing
from pybp.cl.device import describe, open_device
from pybp.cl.staging import Staging
from pybp.io.output import disk, disks, hdf5, npy
from pybp.stream.sources import WRITE_PIECE_BYTES

GB = 1e9
THREADS = (1, 2, 4, 8, 16, 32, 64)  # host copies' thread counts, up to twice the cores


def _best_seconds(step, repeats, prepare=None) -> float:
    """The least wall time of ``step()`` over ``repeats`` calls after one warm-up: a
    limit is the most the machine did (a bound below a run that reached more is no
    bound: a disk's writes with fsync ran 1.38 GB/s in a median of 1 GiB, and the
    command's 16 GiB of TIFF slices 1.8 GB/s in the same call). ``prepare()``, where
    given, runs untimed before each call."""
    times = []
    for k in range(repeats + 1):
        if prepare is not None:  # untimed
            prepare()
        tick = time.perf_counter()
        step()
        times.append(time.perf_counter() - tick)
    return min(times[1:])


def host_copies(n_bytes: int, repeats: int = 3, threads=None) -> dict:
    """GB/s copied by NumPy over each count of ``threads`` (default: :data:`THREADS` up
    to twice the cores), ``n_bytes`` a copy, in as many blocks as threads times four."""
    cores = os.cpu_count() or 1
    counts = threads or [t for t in THREADS if t <= 2 * cores]
    source = np.ones(max(1, n_bytes // 4), np.float32)
    destination = np.zeros_like(source)
    rates = {}
    for count in counts:
        edges = np.linspace(0, source.size, 4 * count + 1).astype(int)
        with ThreadPoolExecutor(count) as pool:
            def copy():
                for future in [pool.submit(np.copyto, destination[a:b], source[a:b])
                               for a, b in zip(edges[:-1], edges[1:])]:
                    future.result()
            rates[count] = source.nbytes / _best_seconds(copy, repeats) / GB
    return rates


def transfers(devices, n_bytes: int, repeats: int = 3) -> dict:
    """Page-locked transfers of ``n_bytes``: ``{"devices": [{"name", "up", "down"}...],
    "all_up", "all_down"}`` in GB/s, each device alone, then every device at once (the
    sum of their bytes over the wall time; one thread a device)."""
    members = []
    for device in devices:
        cl_device, context, _ = open_device(device)
        queue = cl.CommandQueue(context)
        staging = Staging(queue)
        host = staging.array(max(1, n_bytes // 4), np.float32)
        host[:] = 1
        buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE, host.nbytes)
        members.append((describe(cl_device), queue, staging, host, buffer))

    def up(member):
        _, queue, _, host, buffer = member
        pacing.wait(cl.enqueue_copy(queue, buffer, host, is_blocking=False))

    def down(member):
        _, queue, _, host, buffer = member
        pacing.wait(cl.enqueue_copy(queue, host, buffer, is_blocking=False))

    def together(step):
        def run():
            threads = [threading.Thread(target=step, args=(m,)) for m in members]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        return run

    try:
        size = members[0][3].nbytes
        each = [dict(name=m[0].name, up=size / _best_seconds(lambda: up(m), repeats) / GB,
                     down=size / _best_seconds(lambda: down(m), repeats) / GB)
                for m in members]
        total = size * len(members)
        return dict(devices=each,
                    all_up=total / _best_seconds(together(up), repeats) / GB,
                    all_down=total / _best_seconds(together(down), repeats) / GB)
    finally:
        for member in members:
            member[2].release()


def _synced(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def drop_from_cache(path):
    """The file's pages out of the page cache (written back first), where the system
    allows: the next read comes from the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _write_npy(path, volume, threads, sync):
    """One ``.npy`` as the command's output writes it: its space reserved, then pieces
    of whole slices (:data:`pybp.stream.sources.WRITE_PIECE_BYTES`) by ``threads``
    threads, each piece flushed (``sync``) by the thread that wrote it."""
    head = npy.header(volume.shape, volume.dtype)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        offset, per_slice = len(head), volume[0].nbytes
        disk.reserve(fd, offset + volume.nbytes)
        disk.write_all(fd, head, 0)
        per = max(1, WRITE_PIECE_BYTES // per_slice)

        def piece(a):
            disk.write_all(fd, volume[a:a + per], offset + a * per_slice)
            if sync:
                os.fsync(fd)
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(piece, range(0, len(volume), per)))
    finally:
        os.close(fd)
    if sync:
        _synced(path)


def _write_hdf5(path, volume, threads, sync):
    """One HDF5 dataset chunked per slice as the command's output writes it
    (:mod:`pybp.io.output.hdf5`): pieces of whole slices by ``threads`` threads, each
    straight to its chunks' bytes and flushed (``sync``) by the thread that wrote it;
    through h5py, one call at a time, where the chunks' bytes are not known."""
    import h5py
    lock, per = threading.Lock(), max(1, WRITE_PIECE_BYTES // volume[0].nbytes)
    with h5py.File(path, "w") as f:
        data = hdf5.make_slices(f, "volume", volume.shape, volume.dtype)
        f.flush()
        offsets = hdf5.slice_offsets(data)
        fd = os.open(path, os.O_RDWR) if offsets is not None else None

        def piece(a):
            if fd is not None:
                hdf5.write_planes(fd, offsets, a, volume[a:a + per])
                if sync:
                    os.fsync(fd)
                return
            with lock:
                data[a:a + per] = volume[a:a + per]
                if sync:
                    f.flush()
                handle = f.id.get_vfd_handle()
            if sync:
                os.fsync(handle)
        try:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(piece, range(0, len(volume), per)))
        finally:
            if fd is not None:
                os.close(fd)
    if sync:
        _synced(path)


def _write_tiffs(path, volume, threads, sync):
    """A file a slice, each written and (``sync``) flushed to the disk by one of
    ``threads`` threads, as the command's writers do."""
    import tifffile
    path.mkdir(exist_ok=True)

    def one(k):
        name = path / f"slice_{k:05d}.tif"
        tifffile.imwrite(name, volume[k])
        if sync:
            _synced(name)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(len(volume))))


def _read_threads(path, into, offset, threads):
    """The file's bytes from ``offset`` into ``into`` by ``threads`` threads, each
    ``pread``-ing its part (as the command's readers take a file's parts)."""
    flat = memoryview(into).cast("B")
    edges = np.linspace(0, len(flat), threads + 1).astype(int)
    fd = os.open(path, os.O_RDONLY)
    try:
        def part(a, b):
            while a < b:
                got = os.preadv(fd, [flat[a:b]], offset + a)
                if got <= 0:
                    raise OSError(f"{path}: ended early")
                a += got
        with ThreadPoolExecutor(threads) as pool:
            for future in [pool.submit(part, a, b) for a, b in zip(edges[:-1], edges[1:])]:
                future.result()
    finally:
        os.close(fd)


KEEP_BYTES = 256 << 20  # smaller files tell little of the writer threads a disk wants
# The formats a run writes: the writer, the name, and the library it needs (an extra)
FORMATS = {"npy": (_write_npy, "volume.npy", None), "hdf5": (_write_hdf5, "volume.h5", "h5py"),
           "tiff": (_write_tiffs, "slices", "tifffile")}


def check_folder(folder, n_bytes: int):
    """``folder`` takes a file of ``n_bytes`` (the files' volume, one at a time), or an
    error naming ``--folder`` before anything is timed: a read-only one used to fail
    after the copies were."""
    try:
        probe = Path(tempfile.mkdtemp(prefix="pybp-io-", dir=folder))
        probe.rmdir()
    except OSError as exc:
        raise ValueError(f"--folder: cannot write in {folder} ({exc.strerror})") from None
    free = shutil.disk_usage(folder).free
    if free < n_bytes:
        raise ValueError(f"--folder: {folder} has {free / 2 ** 30:.3g} GiB free, the files "
                         f"take {n_bytes / 2 ** 30:.3g} GiB: give a smaller --gib or another "
                         "--folder")


def files(folder, shape, repeats: int = 2, threads=None) -> dict:
    """File speeds in ``folder`` (a directory made and removed inside it) for a float32
    volume of ``shape`` ``(slices, ny, nx)``, GB/s: ``write_cache`` and ``write_disk``
    of each format (:data:`FORMATS`; ``None`` where its library is missing; the disk's
    with every file's ``fsync``, as the command writes; TIFF's files and the ``.npy``'s
    and the HDF5 dataset's pieces by the best of ``threads`` threads, each flushing its
    own; ``write_disk_FORMAT_threads``: the count that did best), ``read_cache`` and
    ``read_disk`` of the ``.npy`` (the best of ``threads`` threads), and
    ``filesystem``. ``threads``: default 1, 4, the cores and twice them."""
    cores = os.cpu_count() or 1
    counts = threads or sorted({1, min(4, cores), cores, 2 * cores})
    volume = np.random.default_rng(0).random(shape, np.float32)
    found = dict(filesystem=disks.mount(folder)[1], bytes=volume.nbytes)
    work = Path(tempfile.mkdtemp(prefix="pybp-io-", dir=folder))
    def rate(step, prepare=None):
        return volume.nbytes / _best_seconds(step, repeats, prepare) / GB
    try:
        for name, (write, file_name, library) in FORMATS.items():
            if library is not None:
                try:
                    __import__(library)
                except ImportError:
                    found[f"write_cache_{name}"] = found[f"write_disk_{name}"] = None
                    continue
            written = []

            def removed():  # the files written so far (the disk holds one at a time)
                for target in written:
                    shutil.rmtree(target) if target.is_dir() else target.unlink()
                written.clear()

            def to(n, sync):
                # a new file each time, as a run writes (not one written over)
                target = work / f"{len(written)}-{file_name}"
                written.append(target)
                write(target, volume, n, sync)

            found[f"write_cache_{name}"] = max(rate(lambda: to(n, False), removed)
                                               for n in counts)
            by_threads = {n: rate(lambda: to(n, True), removed) for n in counts}
            best = max(by_threads, key=by_threads.get)
            found[f"write_disk_{name}"], found[f"write_disk_{name}_threads"] = \
                by_threads[best], best
            found[f"write_disk_{name}_by_threads"] = by_threads
            if name == "npy":  # the last, read back below
                npy = written.pop()
            removed()
        with open(npy, "rb") as f:
            np.lib.format.read_magic(f)
            np.lib.format.read_array_header_1_0(f)
            offset = f.tell()
        into = np.empty_like(volume)
        found["read_cache"] = max(rate(lambda: _read_threads(npy, into, offset, n))
                                  for n in counts)

        def cold(n):
            drop_from_cache(npy)
            _read_threads(npy, into, offset, n)
        found["read_disk"] = max(rate(lambda: cold(n)) for n in counts)
        if not np.array_equal(into, volume):
            raise RuntimeError(f"{npy}: read back other values than were written")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return found


@dataclass(frozen=True)
class Traffic:
    """The bytes a run moves: ``read`` from its file, ``written`` to its output (in
    ``format``), ``copied`` by the host (into and out of page-locked staging), ``up``
    and ``down`` each device's bus (all devices together: shared among ``devices``);
    ``kernel_seconds`` of one device's kernels (None: unknown), shared among them too."""

    name: str
    read: int
    written: int
    copied: int
    up: int
    down: int
    format: str = "npy"
    devices: int = 1
    kernel_seconds: float | None = None


def bounds(case: Traffic, limits: dict, cached: bool = True) -> dict:
    """Seconds each limit alone allows ``case`` (``limits`` as :func:`measure` gives
    them; the input read from the page cache where ``cached``, else from the disk the
    output is written to, which then does both in turn: ``disk``), and ``bound``, the
    largest: the case's lower bound, and ``held_by``, the limit that sets it."""
    copies = max(limits["host_copies"].values())
    moves = limits["transfers"]
    devices = moves["devices"][:case.devices]
    up = min(moves["all_up"], sum(d["up"] for d in devices)) if case.devices > 1 else \
        devices[0]["up"]
    down = min(moves["all_down"], sum(d["down"] for d in devices)) if case.devices > 1 else \
        devices[0]["down"]
    speeds = limits["files"]
    written = speeds.get(f"write_disk_{case.format}")
    seconds = {
        "read": case.read / (speeds["read_cache" if cached else "read_disk"] * GB),
        "write": case.written / (written * GB) if written else None,
        "host copies": case.copied / (copies * GB),
        "up": case.up / (up * GB),
        "down": case.down / (down * GB),
        "kernels": None if case.kernel_seconds is None else case.kernel_seconds / case.devices,
    }
    if not cached and seconds["write"] is not None:  # one disk reads and writes
        seconds["disk"] = seconds["read"] + seconds["write"]
    known = {k: v for k, v in seconds.items() if v is not None}
    held_by = max(known, key=known.get)
    return dict(seconds, bound=known[held_by], held_by=held_by)


def load(path) -> dict:
    """Limits that ``pybp bench --io --json`` wrote."""
    with open(path) as f:
        return json.load(f)


def against(case: Traffic, limits: dict, wall: float, cached: bool = True) -> str:
    """A run of ``case`` that took ``wall`` seconds beside its bound, as a line."""
    b = bounds(case, limits, cached)
    return (f"{wall:.2f} s against a bound of {b['bound']:.2f} s (held by {b['held_by']}): "
            f"{100 * b['bound'] / wall:.0f}% of the bound's speed")


def standard_cases(size: int, devices: int = 1) -> list:
    """Issue 53's cases at ``size`` (2048: theirs), from uint16 counts in a DXchange file
    to float32: parallel beam, ``size`` angles x ``size`` rows x ``size`` columns to
    ``size`` slices, and cone beam, ``size`` projections of ``size`` x ``size`` to a
    ``size``^3 volume; each to ``.npy``, HDF5 and TIFF slices. The host copies the
    counts into page-locked staging and the slices out of it; the bus carries the counts
    as they are (uint16: issue 53 keeps integers to the device) and the volume down."""
    counts, volume = 2 * size ** 3, 4 * size ** 3
    cases = []
    for geometry in ("parallel", "cone"):
        for form in FORMATS:
            cases.append(Traffic(f"{geometry} {size}^3 to {form}", read=counts, written=volume,
                              copied=counts + volume, up=counts,
                              down=volume, format=form, devices=devices))
    return cases


def measure(devices, folder=None, n_bytes=1 << 30, shape=(64, 1024, 1024), repeats=3,
            progress=print) -> dict:
    """Every limit on this machine: ``host_copies``, ``transfers`` (of ``devices``) and
    ``files`` (in ``folder``, default the system's temporary folder), each told to
    ``progress`` as it is measured."""
    folder = folder or tempfile.gettempdir()
    progress(f"host copies of {n_bytes / 2 ** 30:.3g} GiB ...")
    limits = dict(host_copies=host_copies(n_bytes, repeats))
    progress(f"page-locked transfers of {n_bytes / 2 ** 30:.3g} GiB ...")
    limits["transfers"] = transfers(devices, n_bytes, repeats)
    progress(f"files of {np.prod(shape) * 4 / 2 ** 30:.3g} GiB in {folder} ...")
    limits["files"] = files(folder, shape, max(1, repeats - 1))
    return limits


def keep_writers(folder, files: dict):
    """Keep, for ``folder``'s disk, the writer threads that did best for each format in
    ``files`` (:func:`files`), so that outputs there are written by as many
    (:mod:`pybp.io.output.disks`); only where the files were of :data:`KEEP_BYTES` or
    more. The file they are kept in, or None."""
    counts = writer_counts(files)
    if files.get("bytes", 0) < KEEP_BYTES or not counts:
        return None
    return disks.record(folder, counts)


def writer_counts(files: dict) -> dict:
    """Format -> the writer threads that did best to the disk, in ``files``."""
    return {form: files[f"write_disk_{form}_threads"] for form in FORMATS
            if files.get(f"write_disk_{form}_threads")}


def _from(files: dict, form: str) -> str:
    """``, from N threads``: the writer threads of the disk's best (limits that have it),
    and the GB/s of each count measured (``; 1: 1.2, 4: 2.0 ...``)."""
    threads = writer_counts(files).get(form)
    counts = files.get(f"write_disk_{form}_by_threads") or {}
    each = "; " + ", ".join(f"{n}: {r:.2f}" for n, r in counts.items()) if counts else ""
    return f", from {threads} threads{each}" if threads else ""


def report(limits: dict, cases=()) -> str:
    """The limits and each case's bound, as text."""
    lines = ["host copies (NumPy, GB/s by threads): " + ", ".join(
        f"{t}: {r:.1f}" for t, r in limits["host_copies"].items())]
    moves = limits["transfers"]
    for d in moves["devices"]:
        lines.append(f"page-locked transfers, {d['name']}: up {d['up']:.1f} GB/s, down "
                     f"{d['down']:.1f} GB/s")
    if len(moves["devices"]) > 1:
        lines.append(f"every device at once: up {moves['all_up']:.1f} GB/s, down "
                     f"{moves['all_down']:.1f} GB/s in all")
    f = limits["files"]
    lines.append(f"files ({f['filesystem']}): read {f['read_cache']:.2f} GB/s from the page "
                 f"cache, {f['read_disk']:.2f} GB/s from the disk")
    for form in FORMATS:
        cache, to_disk = f.get(f"write_cache_{form}"), f.get(f"write_disk_{form}")
        lines.append(f"  write {form}: " + ("its library is not installed (the io extra: "
                                            "pip install \".[io]\")" if cache is None else
                                            f"{cache:.2f} GB/s into the page cache, {to_disk:.2f} "
                                            f"GB/s to the disk (fsync{_from(f, form)})"))
    for case in cases:
        b = bounds(case, limits)
        parts = ", ".join(f"{k} {v:.2f} s" for k, v in b.items()
                          if k not in ("bound", "held_by") and v is not None)
        lines.append(f"{case.name} on {case.devices} device(s): at least {b['bound']:.2f} s, "
                     f"held by {b['held_by']} ({parts})")
    return "\n".join(lines)
