"""What the three kinds of output share: the record of what the slices are (pybp's
mark, and what a resumed run must share with the first), the slices done, the ranges
still to write, and removing what a run made that wrote no slice."""

from __future__ import annotations

import errno
from pathlib import Path

import numpy as np

from pybp import __version__
from pybp.io.output import disks
from pybp.io.output.lock import OutputLock

DTYPES = ("float32", "float16")
FLOAT16_MAX = 65504.0
METADATA = "pybp.json"
MARK = "pybp"  # the metadata key (pybp's version) that says pybp made an output
# What a resumed run must share with the first one (the rest is informational), in the
# order they are checked. The device and the kernels' parameter sets are among them:
# another device, or other kernels (another --slices-per-pass, a profile `pybp tune`
# saved since), give values that differ in their last bits, and one volume would mix
# two. They come last: another method or option changes the kernels too, and the
# message then names what the user changed, not the device.
# The method comes before the options of one method, so that an FBP output resumed by
# SIRT names the method, not FBP's filter that SIRT lacks.
RESUME_KEYS = ("input", "input_sha1", "shape", "first_row", "dtype", "center", "angles_sha1",
               "log", "method", "filter", "padding", "interpolation", "precision",
               "slice_shape", "circle", "voxel_size", "volume_offset", "matrices_sha1", "rings",
               "ring_options", "phase", "chunk_slices", "memory_limit", "slices_per_pass",
               "iterations", "nonnegative", "relaxation", "subsets", "weight", "devices")
# What a key stored by none means: FBP's (FDK's) metadata holds no method
ABSENT = {"method": "fbp"}


def partial_path(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def sidecar_path(path: Path) -> Path:
    return path.with_suffix(".json")


def files_of(path: Path, kind: str) -> list:
    """Every path an output of ``kind`` at ``path`` writes (the folder for TIFF)."""
    if kind == "tiff":
        return [path]
    files = [path, partial_path(path)]
    if kind == "npy":
        files += [path.with_name(path.name + ".partial.done"), sidecar_path(path)]
    return files


def is_pybp(metadata) -> bool:
    return isinstance(metadata, dict) and MARK in metadata


def _devices_text(devices) -> str:
    """What a record of devices and kernels (:meth:`pybp.Reconstructor.kernels`) says."""
    if not isinstance(devices, list):
        return str(devices)
    return "; ".join(f"{d.get('name')} with kernels {', '.join(d.get('kernels', []))}"
                     for d in devices)


def check_same(stored, metadata, where):
    if not is_pybp(stored):
        raise FileExistsError(f"resume: {where} was not written by pybp; choose another name")
    for key in RESUME_KEYS:
        was, now = stored.get(key, ABSENT.get(key)), metadata.get(key, ABSENT.get(key))
        if was != now:
            if key == "input_sha1" and ":" not in str(was):
                raise ValueError(f"resume: {where} was made by pybp {stored.get(MARK)}, "
                                 "whose hash of the input took fewer of its values; "
                                 "--overwrite starts again")
            if key == "input_sha1":
                raise ValueError(f"resume: {where} was made from other data in "
                                 f"{metadata.get('input')} (it changed since); --overwrite "
                                 "starts again")
            if key == "devices" and key not in stored:
                raise ValueError(f"resume: {where} was made by pybp {stored.get(MARK)}, "
                                 f"which did not store {key}; --overwrite starts again")
            if key == "devices":
                raise ValueError(f"resume: {where} was made on {_devices_text(stored[key])}; "
                                 f"this run has {_devices_text(metadata.get(key))}, whose "
                                 "values differ in their last bits: resume on the same "
                                 "device (--device), or --overwrite to start again")
            raise ValueError(f"resume: {where} was made with {key}={was!r}, this run has "
                             f"{now!r}; give the same options, or --overwrite to start again")


def converted(slices, dtype, first_row):
    """``slices`` as ``dtype``; a value beyond float16's range is an error, not inf."""
    slices = np.asarray(slices)
    if dtype == np.float16 and len(slices):
        peaks = np.abs(slices.reshape(len(slices), -1)).max(axis=1)
        over = np.flatnonzero(~(peaks <= FLOAT16_MAX))
        if len(over):
            raise ValueError(f"dtype: the slice of row {first_row + over[0]} has values up to "
                             f"{peaks[over[0]]:.6g}, beyond float16's {FLOAT16_MAX:g}; write "
                             "float32 (--dtype float32 --overwrite)")
    return np.ascontiguousarray(slices, dtype)


class Output:
    """Shared by the three kinds: ``shape``, ``dtype``, ``done`` (one flag per slice),
    ``remaining()`` row ranges, ``finish()``, ``close()``, and ``discard()`` (what this
    run made, when it wrote no slice). ``writers``: the threads that did best writing
    this kind to this disk (:mod:`pybp.io.output.disks`), or None (the writers'
    defaults)."""

    kind = None  # "npy", "hdf5" or "tiff"

    def __init__(self, path, shape, dtype, metadata):
        self.path, self.shape, self.dtype = Path(path), tuple(shape), np.dtype(dtype)
        self.writers = disks.writers(self.path, self.kind)
        self.metadata = dict(metadata, shape=list(self.shape), dtype=self.dtype.name)
        self.metadata.setdefault(MARK, __version__)
        self.first_row = int(self.metadata.get("first_row", 0))
        self.done = np.zeros(self.shape[0], bool)
        self.made = []  # paths this run created, removed again by discard()
        self.lock = None

    @property
    def slice_bytes(self):
        return self.shape[1] * self.shape[2] * self.dtype.itemsize

    def remaining(self, align=1):
        """``(first, stop)`` ranges that hold every slice not yet written, in order, their
        ends moved out to multiples of ``align`` (or the last slice). With ``align`` the
        widest pass, a resumed run groups slices into kernel passes as one run does, so
        it gives the same values bit for bit (a few whole slices are written again)."""
        todo = np.flatnonzero(~self.done)
        if not len(todo):
            return []
        breaks = np.flatnonzero(np.diff(todo) != 1) + 1
        runs = []
        for run in np.split(todo, breaks):
            first = int(run[0]) // align * align
            stop = min(self.shape[0], -(-(int(run[-1]) + 1) // align) * align)
            if runs and first <= runs[-1][1]:
                runs[-1] = (runs[-1][0], stop)
            else:
                runs.append((first, stop))
        return runs

    def view(self, first, stop):
        """Slices ``[first, stop)`` as an output of their own, for one reconstruct call."""
        return View(self, first, stop)

    def scan_done(self):
        return self.done

    def settle(self):
        """Wait for the writes in flight to end (each whole, or removed); those queued
        and not started are dropped."""

    def failure(self, exc) -> str:
        """One line for a write that failed: the output, the slices complete, --resume."""
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            reason = f"the disk is full: {reason}"
        done = int(self.scan_done().sum())
        return (f"output: cannot write {self.path} ({reason}); {done} of {self.shape[0]} "
                "slices are complete: free some space (or fix the disk) and run the same "
                "command with --resume")

    def _lock(self, lock_path):
        self.lock = OutputLock(lock_path, self.path)
        self.lock.acquire()

    def finish(self):
        pass

    def close(self):
        if self.lock is not None:
            self.lock.release()

    def discard(self):
        """Remove what this run made, if it wrote no slice (counted once the writes in
        flight have ended): a command that failed before its first slice leaves the
        file system as it was."""
        if not self.made:
            return
        self.settle()
        if self.scan_done().any():
            return
        self.close()
        for path in reversed(self.made):
            try:
                path.rmdir() if path.is_dir() else path.unlink(missing_ok=True)
            except OSError:
                pass  # a folder that now holds files of someone else's: kept


class View:
    def __init__(self, output, first, stop):
        self.output, self.first = output, first
        self.shape, self.dtype = (stop - first,) + output.shape[1:], output.dtype
        self.kind, self.writers = output.kind, output.writers

    def __setitem__(self, key, slices):
        start = 0 if key.start is None else key.start
        self.output[self.first + start:self.first + start + len(slices)] = slices
