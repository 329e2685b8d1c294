"""Slices to files, none lost, none half-written and nothing else replaced: a folder of
TIFF slices (one file per detector row), one HDF5 dataset chunked per slice, or a
``.npy`` stack.

Each output is an array-like ``(n_slices, ny, nx)`` that :func:`pybp.reconstruct`
writes into (``out[a:b] = slices``). A TIFF slice is written under a temporary name,
flushed to the disk and renamed; an HDF5 or ``.npy`` output is built under
``NAME.partial``, its space reserved at the start, with a record of the slices complete
(updated after their data reached the disk) and renamed when every slice is in. So an
interrupted run, a full disk or a power cut leaves only whole slices, and
``resume=True`` finds them and writes the rest.

What the slices are (pybp's version, the input and a fingerprint of its data, the
centre exactly, every option that changes a value) is stored with them (``pybp.json``
in the folder, attributes in HDF5, ``NAME.json`` beside a ``.npy``): that is pybp's
mark. ``resume`` and ``overwrite`` act only on outputs that carry it, and a resumed run
must match it. One process writes an output at a time (:class:`OutputLock`).
"""

from __future__ import annotations

import errno
import io
import json
import math
import os
import re
import shutil
import socket
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from pybp import __version__
from pybp.io.readers import HDF5_SUFFIXES, TiffStack
from pybp.io.scan import need

try:
    import fcntl
except ImportError:  # Windows: the lock file's existence is the lock
    fcntl = None

DTYPES = ("float32", "float16")
FLOAT16_MAX = 65504.0
WRITE_THREADS = 8      # TIFF files written at once
_POOL_LOCK = threading.Lock()  # guards the making of a TiffSlices' threads
FREE_SPACE_MARGIN = 1.02  # headers, and room for the file system
METADATA = "pybp.json"
H5_METADATA = "pybp_metadata"  # JSON; scalar entries are attributes of their own too
LOCK = ".pybp-lock"
MARK = "pybp"  # the metadata key (pybp's version) that says pybp made an output
# What a resumed run must share with the first one (the rest is informational).
# The device and the kernels' parameter sets are among them: another device, or other
# kernels (another --slices-per-pass, a profile `pybp tune` saved since), give values
# that differ in their last bits, and one volume would mix two.
RESUME_KEYS = ("input", "input_sha1", "shape", "first_row", "dtype", "center", "angles_sha1",
               "log", "filter", "padding", "interpolation", "precision", "slice_shape",
               "circle", "voxel_size", "volume_offset", "matrices_sha1", "rings",
               "ring_options", "phase", "chunk_slices", "slices_per_pass", "devices")
# Write errors that end a run with "N of M slices are complete; --resume".
STORAGE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG)
SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")


class WriteError(OSError):
    """Writing slices failed (the disk is full, the quota reached, the disk failing)."""


class _writing:
    """Turn an ``OSError`` while writing ``path`` into a :class:`WriteError`. A short
    write that carries no error number (NumPy's ``tofile``, which tifffile writes
    slices with, says "4096 requested and 952 written") is the disk or a quota that
    is full: ``ENOSPC``."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, traceback):
        if kind is not None and issubclass(kind, OSError) and not isinstance(exc, WriteError):
            number, reason = exc.errno, exc.strerror or str(exc)
            if number is None and SHORT_WRITE.search(str(exc)):
                number, reason = errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({exc})"
            raise WriteError(number, f"{self.path}: {reason}") from exc


def output_kind(path) -> str:
    text = str(path)
    if not text.strip():
        raise ValueError("output: the name is empty; give a folder for TIFF slices, or a "
                         ".h5 or .npy file name")
    suffix = Path(text).suffix.lower()
    if suffix in HDF5_SUFFIXES:
        return "hdf5"
    if suffix == ".npy":
        return "npy"
    if suffix in (".tif", ".tiff"):
        raise ValueError(f"output: {path} names a TIFF file; slices go into a folder, one "
                         "file per slice: give a folder name")
    return "tiff"


def _partial(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def _sidecar(path: Path) -> Path:
    return path.with_suffix(".json")


def _files_of(path: Path, kind: str) -> list:
    """Every path an output of ``kind`` at ``path`` writes (the folder for TIFF)."""
    if kind == "tiff":
        return [path]
    files = [path, _partial(path)]
    if kind == "npy":
        files += [path.with_name(path.name + ".partial.done"), _sidecar(path)]
    return files


def _lock_path(path: Path, kind: str) -> Path:
    return path / LOCK if kind == "tiff" else path.with_name(f".{path.name}{LOCK}")


def _input_paths(spec):
    """The files and folders an input argument names (a glob: its folder and files)."""
    text = str(spec)
    if ":/" in text and not os.path.exists(text):
        text = text.split(":/", 1)[0]  # FILE:/ENTRY
    if any(ch in text for ch in "*?["):
        import glob

        return [Path(text).parent.resolve()] + [Path(p).resolve() for p in glob.glob(text)]
    return [Path(text).resolve()]


def check_not_input(path, kind, inputs):
    """Refuse an output that is an input, lies inside an input folder, or (a folder of
    slices) holds an input."""
    out = Path(path).resolve()
    written = [p.resolve() for p in _files_of(Path(path), kind)]
    for spec in inputs:
        if spec is None:
            continue
        for source in _input_paths(spec):
            if source in written and source != out:  # NAME.json beside NAME.npy, say
                raise ValueError(f"output: {path} would write {source.name} beside it, which "
                                 f"is the input {spec}; give another name (pybp never writes "
                                 "over its input)")
            if source in written or (source.is_dir() and source in out.parents):
                raise ValueError(f"output: {path} is the input {spec}, or inside it; give "
                                 "another name (pybp never writes over its input)")
            if kind == "tiff" and out in source.parents:
                raise ValueError(f"output: the folder {path} holds the input {spec}; give "
                                 "another folder")


def _is_pybp(metadata) -> bool:
    return isinstance(metadata, dict) and MARK in metadata


def check_output_path(path, overwrite=False, resume=False, inputs=()) -> str:
    """Check an output path before any work, touching nothing; return its kind. It must
    not be (or be inside) one of ``inputs``; an existing output needs ``overwrite`` or
    ``resume``, and either acts only on an output pybp made; the folder it goes in (a
    TIFF folder's nearest existing parent) must be writable."""
    kind = output_kind(path)
    path = Path(path)
    if overwrite and resume:
        raise ValueError("resume: --resume and --overwrite exclude each other")
    check_not_input(path, kind, inputs)
    if kind == "tiff":
        if path.exists() and not path.is_dir():
            raise FileExistsError(f"output: {path} is a file; give a folder name")
        existing = path.is_dir() and (any(path.glob("slice_*.tif")) or (path / METADATA).exists())
        # pybp makes the output folder, not the folders it goes in: a missing parent is
        # a mistyped path far more often than a wish.
        _writable_folder(path if path.is_dir() else path.parent, create=False)
    else:
        if path.is_dir():
            raise FileExistsError(f"output: {path} is a folder; give a file name")
        existing = any(p.exists() for p in _files_of(path, kind))
        _writable_folder(path.parent, create=False)
    if existing:
        OutputLock(_lock_path(path, kind), path).check_free()
    if existing and not (overwrite or resume):
        found = path if kind == "tiff" else next(p for p in _files_of(path, kind) if p.exists())
        raise FileExistsError(f"output: {found} exists; pass --resume to finish it, or "
                              "--overwrite to replace it")
    if existing and not _is_pybp(stored_metadata(path)) and not _killed_early(path, kind):
        what = "holds slices" if kind == "tiff" else "exists"
        if kind != "tiff" and not path.exists():
            path = next(p for p in _files_of(path, kind) if p.exists())
        raise FileExistsError(f"output: {path} {what} but pybp did not write it (no pybp "
                              "metadata); pybp resumes and replaces only its own outputs: "
                              "choose another name")
    return kind


def _killed_early(path: Path, kind: str) -> bool:
    """Whether the files at ``path`` are the partial files of a pybp run killed before
    it marked them (``NAME.partial`` and its record, nothing else): its lock file is
    still there (a run that ends removes it) and no process holds it (checked before).
    Such an output is pybp's: ``--resume`` and ``--overwrite`` start it again."""
    if kind == "tiff" or not _lock_path(path, kind).is_file():
        return False
    ours = [_partial(path), path.with_name(path.name + ".partial.done")]
    return not [p for p in _files_of(path, kind) if p.exists() and p not in ours]


def check_output_file(path, overwrite=False, suffixes=None, option="--output") -> Path:
    """Check a one-file output (a picture, a kernel's source) before any work: a known
    suffix, not a folder, no existing file without ``overwrite``, a writable folder."""
    if not str(path).strip():
        raise ValueError(f"{option}: the name is empty")
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{option}: {path} is a folder; give a file name")
    if suffixes and path.suffix.lower() not in suffixes:
        raise ValueError(f"{option}: expected a {', '.join(suffixes)} file name, got {path.name!r}")
    if path.exists() and not overwrite:
        raise FileExistsError(f"{option}: {path} exists; choose another name or pass --overwrite")
    _writable_folder(path.parent, create=False, option=option)
    return path


def _human(n_bytes):
    if n_bytes >= 1e15:
        return f"{n_bytes / 1e12:.3g} TB"
    return f"{n_bytes / 1e9:.2f} GB" if n_bytes >= 1e8 else f"{n_bytes / 1e6:.1f} MB"


def _writable_folder(folder: Path, create: bool, option="output"):
    if create:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PermissionError(f"{option}: cannot create folder {folder}: "
                                  f"{exc.strerror or exc}") from None
    if not folder.exists():
        raise FileNotFoundError(f"{option}: folder {folder} does not exist")
    if not folder.is_dir():
        raise NotADirectoryError(f"{option}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"{option}: folder {folder} is not writable")


def check_free_space(folder: Path, n_bytes: int):
    while not folder.exists():
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if n_bytes * FREE_SPACE_MARGIN > free:
        raise OSError(errno.ENOSPC, f"output: the slices need {_human(n_bytes)}; {folder} has "
                                    f"{_human(free)} free")


def _sync_folder(folder: Path):
    """Make renames in ``folder`` durable (a power cut keeps them)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # folders that cannot be synced (some network file systems)
    finally:
        os.close(fd)


def _write_all(fd, data, offset=None):
    """Every byte of ``data`` to ``fd`` (at ``offset``): a short write is retried, so a
    full disk shows as ``ENOSPC`` rather than a count of bytes."""
    view = memoryview(data).cast("B")
    while len(view):
        n = os.write(fd, view) if offset is None else os.pwrite(fd, view, offset)
        view = view[n:]
        if offset is not None:
            offset += n


def _reserve(fd, n_bytes):
    """The file's blocks allocated now, so that a full disk shows at the start and never
    in the middle of a run (where libhdf5 and memory maps cannot report it)."""
    try:
        os.posix_fallocate(fd, 0, n_bytes)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return  # a file system that allocates on write
        raise OSError(exc.errno, f"output: cannot reserve {_human(n_bytes)} "
                                 f"({exc.strerror})") from None


def _atomic_write(path: Path, data):
    """``data`` to ``path`` whole: bytes, or a function that writes into the binary file
    it is given (so a slice goes from its array to the file without a copy in memory:
    through a ``BytesIO`` first, TIFF slices were written at a third of the speed).
    Written under a temporary name, flushed to the disk, renamed; readers see a whole
    file or none. The temporary name is the writer's own (process and thread), so two
    writers of one slice (a Dask task run again while the first still runs) never share
    one. The caller syncs the folder."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.partial")
    try:
        with open(temporary, "wb", buffering=0) as file:
            if callable(data):
                data(file)
            else:
                _write_all(file.fileno(), data)
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_json(path: Path, value):
    _atomic_write(path, json.dumps(value, indent=1, sort_keys=True).encode())
    _sync_folder(path.parent)


def _devices_text(devices) -> str:
    """What a record of devices and kernels (:meth:`pybp.Reconstructor.kernels`) says."""
    if not isinstance(devices, list):
        return str(devices)
    return "; ".join(f"{d.get('name')} with kernels {', '.join(d.get('kernels', []))}"
                     for d in devices)


def _check_same(stored, metadata, where):
    if not _is_pybp(stored):
        raise FileExistsError(f"resume: {where} was not written by pybp; choose another name")
    for key in RESUME_KEYS:
        if stored.get(key) != metadata.get(key):
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
            raise ValueError(f"resume: {where} was made with {key}={stored.get(key)!r}, this "
                             f"run has {metadata.get(key)!r}; give the same options, or "
                             "--overwrite to start again")


def _converted(slices, dtype, first_row):
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


class OutputLock:
    """One process writes an output at a time: a lock file held with ``flock`` (the
    kernel releases it when its process dies, so a killed run never leaves it held),
    taken before the output is touched. A second process stops at once with
    ``FileExistsError``, having changed nothing."""

    def __init__(self, path: Path, output: Path):
        self.path, self.output, self.fd = path, output, None

    def acquire(self):
        while True:
            flags = os.O_RDWR | os.O_CREAT | (0 if fcntl else os.O_EXCL)
            try:
                fd = os.open(self.path, flags, 0o644)
            except FileExistsError:
                self._busy("")
            try:
                if fcntl:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
                os.close(fd)
                self._busy(holder)
            try:  # its holder may have released and removed it meanwhile
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"process {os.getpid()} on {socket.gethostname()}".encode())
        self.fd = fd

    def check_free(self):
        """Raise as :meth:`acquire` would if another process holds the lock; take
        nothing (what :func:`check_output_path` asks before reading the output)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            if fcntl is None:
                self._busy("")
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                self._busy(os.pread(fd, 200, 0).decode(errors="replace").strip())
        finally:
            os.close(fd)

    def _busy(self, holder):
        raise FileExistsError(f"output: {self.output} is being written by another pybp "
                              f"{'(' + holder + ') ' if holder else ''}run; wait for it to "
                              "end, or choose another name")

    def release(self):
        if self.fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self.fd)
            self.fd = None


class Output:
    """Shared by the three kinds: ``shape``, ``dtype``, ``done`` (one flag per slice),
    ``remaining()`` row ranges, ``finish()``, ``close()``, and ``discard()`` (what this
    run made, when it wrote no slice)."""

    def __init__(self, path, shape, dtype, metadata):
        self.path, self.shape, self.dtype = Path(path), tuple(shape), np.dtype(dtype)
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
        return _View(self, first, stop)

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


class _View:
    def __init__(self, output, first, stop):
        self.output, self.first = output, first
        self.shape, self.dtype = (stop - first,) + output.shape[1:], output.dtype

    def __setitem__(self, key, slices):
        start = 0 if key.start is None else key.start
        self.output[self.first + start:self.first + start + len(slices)] = slices


class TiffSlices:
    """Writes slices into ``folder`` as ``slice_00042.tif`` for detector row 42, each
    whole (temporary name, flushed to the disk, renamed), several at once;
    ``slices[a:b] = images`` writes rows ``first_row + a`` on. Picklable: what Dask
    workers write with."""

    def __init__(self, folder, first_row, n_slices, dtype, description):
        self.folder, self.first_row, self.dtype = Path(folder), first_row, np.dtype(dtype)
        self.digits = max(5, len(str(first_row + n_slices - 1)))
        self.description = description
        self._pool = None
        self._state, self._running, self._settled = threading.Condition(), 0, False

    def name(self, index) -> str:
        return f"slice_{self.first_row + index:0{self.digits}d}.tif"

    def write(self, index, image):
        tifffile = need("tifffile")
        image = _converted(image[None], self.dtype, self.first_row + index)[0]
        path = self.folder / self.name(index)
        with _writing(path):
            _atomic_write(path, lambda file: tifffile.imwrite(
                file, image, description=self.description, photometric="minisblack",
                metadata=None))

    def _counted(self, index, image):
        """:meth:`write`, as the pool runs it: counted while it runs, refused once settled."""
        with self._state:
            if self._settled:
                raise RuntimeError(f"output: {self.folder} was closed; {self.name(index)} "
                                   "not written")
            self._running += 1
        try:
            self.write(index, image)
        finally:
            with self._state:
                self._running -= 1
                self._state.notify_all()

    def __setitem__(self, key, slices):
        start = 0 if key.start is None else key.start
        with _POOL_LOCK:  # pieces come from several threads (pybp.stream.executor.WRITES)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="pybp-tiff")
        futures = [self._pool.submit(self._counted, start + i, s) for i, s in enumerate(slices)]
        for future in futures:  # every write ends (whole or removed) before an error is raised
            future.exception()
        _sync_folder(self.folder)  # the renames of those written
        for future in futures:
            future.result()

    def __getstate__(self):
        return dict(self.__dict__, _pool=None, _state=None, _running=0)

    def __setstate__(self, state):
        self.__dict__.update(state, _state=threading.Condition())

    def settle(self):
        """Let the writes that started end; drop those queued (after Ctrl-C); refuse any
        later one. Counted here, not by the pool: a Ctrl-C inside ``Thread.start`` leaves
        a worker the pool does not know of and does not wait for, which then wrote a
        slice after the count ("interrupted after 6 of 128 planes", 7 on the disk)."""
        with self._state:
            self._settled = True
        with _POOL_LOCK:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        with self._state:
            self._state.wait_for(lambda: self._running == 0)

    def close(self):
        self.settle()


class TiffFolder(Output):
    """``FOLDER/slice_00042.tif`` for detector row 42, float32 (or float16)."""

    slices = None

    def open(self, resume=False):
        need("tifffile")
        folder = self.path
        missing = [p for p in [folder, *folder.parents] if not p.exists()]
        _writable_folder(folder, create=True)
        self.made += missing[::-1]
        self._lock(_lock_path(folder, "tiff"))
        self._remove_partial()
        description = json.dumps({k: self.metadata[k] for k in ("center", "filter", "input")
                                  if k in self.metadata})
        self.slices = TiffSlices(folder, self.first_row, self.shape[0], self.dtype, description)
        stored = folder / METADATA
        if resume and stored.exists():
            _check_same(json.loads(stored.read_text()), self.metadata, folder)
            self.scan_done()
        elif stored.exists() or any(folder.glob("slice_*.tif")):  # --overwrite: pybp's own
            for old in folder.glob("slice_*.tif"):  # before the metadata that names them goes
                old.unlink()
            _sync_folder(folder)
        if not stored.exists():
            self.made.append(stored)
        write_json(stored, self.metadata)

    def scan_done(self):
        """Which slices are in the folder (written by this process or any other)."""
        if self.slices is None:  # not opened
            return self.done
        self.done[:] = [(self.path / self.slices.name(i)).exists() for i in range(self.shape[0])]
        return self.done

    def writer(self):
        """What workers in other processes write with (a :class:`TiffSlices`)."""
        return self.slices

    def _remove_partial(self):
        """Temporary files of writers that died mid-slice (a killed run, a lost worker)."""
        for stale in self.path.glob(".slice_*.partial"):
            stale.unlink(missing_ok=True)

    def settle(self):
        if self.slices is not None:
            self.slices.settle()

    def finish(self):
        self._remove_partial()  # every writer has ended

    def __setitem__(self, key, slices):
        start = 0 if key.start is None else key.start
        self.slices[key] = slices
        self.done[start:start + len(slices)] = True

    def close(self):
        if self.slices is not None:
            self.slices.close()
        super().close()


class Hdf5File(Output):
    """Dataset ``/slices`` chunked per slice, the metadata as its attributes; built as
    ``NAME.partial`` with ``/pybp_done`` (one byte per slice), which goes when every
    slice is in (a partial file without it is complete: killed before its rename)."""

    file = record = None

    def open(self, resume=False):
        self.h5py = need("h5py")
        self.partial = _partial(self.path)
        self._lock(_lock_path(self.path, "file"))
        if resume and self.path.exists() and not self.partial.exists():
            with self.h5py.File(self.path, "r") as f:
                _check_same(_h5_metadata(f), self.metadata, self.path)
            self.done[:] = True  # finished before
            return
        if resume and self.partial.exists():
            try:
                self.file = self.h5py.File(self.partial, "r+")
                stored = _h5_metadata(self.file)
            except (OSError, KeyError, ValueError) as exc:  # killed while flushing: start again
                if self.file is not None:
                    self.file.close()
                self.file = None

                warnings.warn(f"output: {self.partial} from the interrupted run cannot be "
                              f"read ({exc}); starting it again", RuntimeWarning, stacklevel=3)
            else:
                _check_same(stored, self.metadata, self.partial)
                record = self.file.get("pybp_done")
                self.done[:] = True if record is None else record[()].astype(bool)
        if self.file is None:
            self._create()
        self.data, self.record = self.file["slices"], self.file.get("pybp_done")

    def _create(self):
        self.made.append(self.partial)
        self.file = self.h5py.File(self.partial, "w")
        h5p, h5d = self.h5py.h5p, self.h5py.h5d
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY)  # every chunk placed now: see _reserve
        dcpl.set_fill_time(h5d.FILL_TIME_NEVER)
        data = self.file.create_dataset("slices", self.shape, self.dtype, dcpl=dcpl,
                                        chunks=(1,) + self.shape[1:])
        data.attrs[H5_METADATA] = json.dumps(self.metadata)
        for key, value in self.metadata.items():
            if isinstance(value, (int, float, str)) and key != H5_METADATA:
                data.attrs[key] = value
        self.file.create_dataset("pybp_done", data=np.zeros(self.shape[0], np.uint8))
        self.file.flush()
        fd = self.file.id.get_vfd_handle()
        _reserve(fd, os.fstat(fd).st_size)
        os.fsync(fd)

    def _sync(self):
        self.file.flush()
        os.fsync(self.file.id.get_vfd_handle())

    def __setitem__(self, key, slices):
        start = 0 if key.start is None else key.start
        data = _converted(slices, self.dtype, self.first_row + start)
        with _writing(self.partial):
            self.data[start:start + len(data)] = data
            self._sync()  # the data on the disk before the record that says it is there
            self.record[start:start + len(data)] = 1
            self._sync()
        self.done[start:start + len(data)] = True

    def finish(self):
        if self.file is not None and self.done.all():
            if self.record is not None:
                del self.file["pybp_done"]
                self.record = None
            self._sync()
            self.file.close()
            self.file = None
            os.replace(self.partial, self.path)
            _sync_folder(self.path.parent)

    def close(self):
        if self.file is not None:
            self.file.close()
            self.file = None
        super().close()


def _h5_metadata(h5file):
    return json.loads(h5file["slices"].attrs[H5_METADATA])


class NpyFile(Output):
    """A ``.npy`` stack built as ``NAME.partial`` (written through the file, not a
    memory map, so that a full disk is an error rather than SIGBUS); which slices are
    in is kept in ``NAME.partial.done`` (one byte per slice); the metadata in
    ``NAME.json``."""

    fd = record_fd = None

    def open(self, resume=False):
        self.partial = _partial(self.path)
        self.record_path = self.path.with_name(self.path.name + ".partial.done")
        self.sidecar = _sidecar(self.path)
        self._lock(_lock_path(self.path, "file"))
        if resume and self.sidecar.exists() and (self.path.exists() or self.partial.exists()):
            _check_same(json.loads(self.sidecar.read_text()), self.metadata, self.path)
            if self.path.exists() and not self.partial.exists():
                self.record_path.unlink(missing_ok=True)  # killed before removing it
                self.done[:] = True
                return
            if self.record_path.exists():
                self.fd = os.open(self.partial, os.O_RDWR)
                self.offset = self._header_offset()
                self.record_fd = os.open(self.record_path, os.O_RDWR)
                record = np.frombuffer(os.pread(self.record_fd, self.shape[0], 0), np.uint8)
                self.done[:len(record)] = record.astype(bool)
        if self.fd is None:
            self._create()

    def _create(self):
        for old in (self.path, self.partial, self.record_path):  # --overwrite: pybp's own
            old.unlink(missing_ok=True)
        if not self.sidecar.exists():
            self.made.append(self.sidecar)
        write_json(self.sidecar, self.metadata)  # first: it describes whatever follows
        self.made += [self.partial, self.record_path]
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, dict(
            descr=np.lib.format.dtype_to_descr(self.dtype), fortran_order=False,
            shape=self.shape))
        self.fd = os.open(self.partial, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.offset = len(header.getvalue())
        _reserve(self.fd, self.offset + self.shape[0] * self.slice_bytes)
        _write_all(self.fd, header.getvalue(), 0)
        self.record_fd = os.open(self.record_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        _write_all(self.record_fd, bytes(self.shape[0]), 0)
        os.fsync(self.fd)
        os.fsync(self.record_fd)
        _sync_folder(self.path.parent)

    def _header_offset(self):
        with open(self.partial, "rb") as f:
            version = np.lib.format.read_magic(f)
            shape, fortran, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                                     else np.lib.format.read_array_header_2_0(f))
            if tuple(shape) != self.shape or dtype != self.dtype or fortran:
                raise ValueError(f"resume: {self.partial} holds {shape} {dtype}, this run "
                                 f"writes {self.shape} {self.dtype}; --overwrite starts again")
            return f.tell()

    def __setitem__(self, key, slices):
        start = 0 if key.start is None else key.start
        data = _converted(slices, self.dtype, self.first_row + start)
        with _writing(self.partial):
            _write_all(self.fd, data, self.offset + start * self.slice_bytes)
            os.fsync(self.fd)  # the data on the disk before the record that says it is there
            _write_all(self.record_fd, b"\1" * len(data), start)
            os.fsync(self.record_fd)
        self.done[start:start + len(data)] = True

    def finish(self):
        if self.fd is not None and self.done.all():
            self._close_files()
            os.replace(self.partial, self.path)
            _sync_folder(self.path.parent)
            self.record_path.unlink(missing_ok=True)

    def _close_files(self):
        for name in ("fd", "record_fd"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)

    def close(self):
        self._close_files()
        super().close()


KINDS = dict(tiff=TiffFolder, hdf5=Hdf5File, npy=NpyFile)


def open_output(path, shape, dtype="float32", metadata=None, overwrite=False, resume=False,
                inputs=()):
    """The output for ``shape = (n_slices, ny, nx)`` slices at ``path`` (a folder for
    TIFF slices, ``.h5``/``.hdf5``/``.nxs``, or ``.npy``), everything checked before the
    file system is touched: not one of ``inputs``; an existing output needs
    ``overwrite`` or ``resume`` and must be pybp's; the folder must be writable and hold
    the slices still to write. Locked against other processes until ``close()``."""
    if str(dtype) not in DTYPES:
        raise ValueError(f"dtype: expected one of {', '.join(DTYPES)}, got {dtype!r}")
    kind = check_output_path(path, overwrite, resume, inputs)
    metadata = dict(metadata or {}, first_row=int((metadata or {}).get("first_row", 0)))
    try:
        json.dumps(metadata).encode()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"output: cannot store what the slices are: {exc}") from None
    if kind == "hdf5":
        try:
            str(Path(path).resolve()).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"output: {os.fsencode(path)!r}: HDF5 needs a file name (and "
                             "folder) in UTF-8; choose another name") from None
    n_bytes = math.prod(int(n) for n in shape[1:]) * np.dtype(dtype).itemsize  # no int64 wrap
    if not resume:
        check_free_space(Path(path) if kind == "tiff" else Path(path).parent, shape[0] * n_bytes)
    output = KINDS[kind](path, shape, dtype, metadata)
    try:
        output.open(resume)
        if resume and kind == "tiff":  # what is still to write (files reserve their space)
            check_free_space(output.path, int((~output.done).sum()) * n_bytes)
    except BaseException:
        output.close()
        output.discard()
        raise
    return output


def stored_metadata(path):
    """What pybp stored with an output at ``path`` (finished or partial), or None."""
    path = Path(path)
    try:
        kind = output_kind(path)
    except ValueError:
        return None
    found = {"tiff": path / METADATA, "npy": _sidecar(path)}.get(kind)
    try:
        if found is not None:
            return json.loads(found.read_text()) if found.exists() else None
        for candidate in (_partial(path), path):
            if candidate.exists():
                with need("h5py").File(candidate, "r") as f:
                    return _h5_metadata(f)
    except (OSError, KeyError, ValueError):
        return None
    return None


def read_slices(path):
    """Slices written by pybp (or any TIFF folder, HDF5 ``/slices`` or ``.npy``), as an
    array-like ``(n_slices, ny, nx)`` and the metadata stored with them."""
    path = Path(path)
    if not path.exists():
        partial = _partial(path)
        being = f" ({partial.name} is a run's, not finished: --resume it)" if partial.exists() \
            else ""
        raise FileNotFoundError(f"input: {path} does not exist{being}")
    kind = output_kind(path) if not path.is_dir() else "tiff"
    if kind == "tiff":
        metadata = json.loads((path / METADATA).read_text()) if (path / METADATA).exists() else {}
        files = sorted(path.glob("slice_*.tif"))
        if not files:
            raise ValueError(f"input: no slice_*.tif files in {path}")
        return TiffStack(files, "input"), metadata
    if kind == "npy":
        sidecar = _sidecar(path)
        metadata = json.loads(sidecar.read_text()) if sidecar.exists() else {}
        slices = np.load(path, mmap_mode="r")
    else:
        h5file = need("h5py").File(path, "r")
        if "slices" not in h5file:
            h5file.close()
            raise ValueError(f"input: {path} has no /slices dataset")
        slices = h5file["slices"]
        metadata = json.loads(slices.attrs.get(H5_METADATA, "{}"))
    if len(slices.shape) != 3:
        raise ValueError(f"input: expected slices (n_slices, ny, nx) in {path}, got shape "
                         f"{tuple(slices.shape)}")
    return slices, metadata
