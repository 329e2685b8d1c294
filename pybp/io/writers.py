"""Slices to files, none lost and none half-written: a folder of TIFF slices (one file
per detector row), one HDF5 dataset chunked per slice, or a ``.npy`` stack.

Each output is an array-like ``(n_slices, ny, nx)`` that :func:`pybp.reconstruct`
writes into (``out[a:b] = slices``). A TIFF slice is written under a temporary name and
renamed; an HDF5 or ``.npy`` output is built under ``NAME.partial`` with a record of
the slices complete (updated after their data is flushed) and renamed when every slice
is in. So an interrupted run leaves only whole slices, and ``resume=True`` finds them
and writes the rest. What the slices are (input, centre, filter, geometry) is stored
with them (``pybp.json`` in the folder, attributes in HDF5, ``NAME.json`` beside a
``.npy``); a resumed run must match it.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .readers import HDF5_SUFFIXES, TiffStack, _need

DTYPES = ("float32", "float16")
WRITE_THREADS = 8      # TIFF files written at once
FREE_SPACE_MARGIN = 1.02  # headers, and room for the file system
METADATA = "pybp.json"
H5_METADATA = "pybp_metadata"  # JSON; scalar entries are attributes of their own too
# What a resumed run must share with the first one (the rest is informational).
RESUME_KEYS = ("input", "shape", "first_row", "dtype", "center", "angles_sha1", "filter",
               "padding", "interpolation", "precision", "slice_shape", "circle")


def output_kind(path) -> str:
    suffix = Path(path).suffix.lower()
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


def check_output_path(path, overwrite=False, resume=False) -> str:
    """Check an output path before any work; return its kind. An existing output needs
    ``overwrite`` or ``resume``; the folder it goes in must exist (a TIFF folder's
    nearest existing parent) and be writable."""
    path = Path(path)
    kind = output_kind(path)
    if overwrite and resume:
        raise ValueError("resume: --resume and --overwrite exclude each other")
    if kind == "tiff":
        if path.exists() and not path.is_dir():
            raise FileExistsError(f"output: {path} is a file; give a folder name")
        existing = path.is_dir() and (any(path.glob("slice_*.tif")) or (path / METADATA).exists())
        parent = path
        while not parent.exists():
            parent = parent.parent
        _writable_folder(parent, create=False)
    else:
        if path.is_dir():
            raise FileExistsError(f"output: {path} is a folder; give a file name")
        existing = path.exists() or _partial(path).exists()
        _writable_folder(path.parent, create=False)
    if existing and not (overwrite or resume):
        raise FileExistsError(f"output: {path} exists; pass --resume to finish it, or "
                              "--overwrite to replace it")
    return kind


def check_output_file(path, overwrite=False, suffixes=None, option="--output") -> Path:
    """Check a one-file output (a picture, a kernel's source) before any work: a known
    suffix, not a folder, no existing file without ``overwrite``, a writable folder."""
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
    free = shutil.disk_usage(folder).free
    if n_bytes * FREE_SPACE_MARGIN > free:
        raise OSError(f"output: the slices need {_human(n_bytes)}; {folder} has "
                      f"{_human(free)} free")


def _atomic_write(path: Path, write):
    """``write(temporary_path)``, then rename to ``path``: readers see a whole file or
    none. The temporary name is the writer's own (process and thread), so two writers
    of one slice (a Dask task run again while the first still runs) never share one."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.partial")
    try:
        write(temporary)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_json(path: Path, value):
    _atomic_write(path, lambda p: p.write_text(json.dumps(value, indent=1, sort_keys=True)))


def _check_same(stored, metadata, where):
    for key in RESUME_KEYS:
        if stored.get(key) != metadata.get(key):
            raise ValueError(f"resume: {where} was made with {key}={stored.get(key)!r}, this "
                             f"run has {metadata.get(key)!r}; give the same options, or "
                             "--overwrite to start again")


class Output:
    """Shared by the three kinds: ``shape``, ``dtype``, ``done`` (one flag per slice),
    ``remaining()`` row ranges, ``finish()`` and ``close()``."""

    def __init__(self, path, shape, dtype, metadata):
        self.path, self.shape, self.dtype = Path(path), tuple(shape), np.dtype(dtype)
        self.metadata = dict(metadata, shape=list(self.shape), dtype=self.dtype.name)
        self.done = np.zeros(self.shape[0], bool)

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

    def finish(self):
        pass

    def close(self):
        pass


class _View:
    def __init__(self, output, first, stop):
        self.output, self.first = output, first
        self.shape, self.dtype = (stop - first,) + output.shape[1:], output.dtype

    def __setitem__(self, key, slices):
        start = 0 if key.start is None else key.start
        self.output[self.first + start:self.first + start + len(slices)] = slices


class TiffSlices:
    """Writes slices into ``folder`` as ``slice_00042.tif`` for detector row 42, each
    whole (temporary name, then rename), several at once; ``slices[a:b] = images``
    writes rows ``first_row + a`` on. Picklable: what Dask workers write with."""

    def __init__(self, folder, first_row, n_slices, dtype, description):
        self.folder, self.first_row, self.dtype = Path(folder), first_row, np.dtype(dtype)
        self.digits = max(5, len(str(first_row + n_slices - 1)))
        self.description = description
        self._pool = None

    def name(self, index) -> str:
        return f"slice_{self.first_row + index:0{self.digits}d}.tif"

    def write(self, index, image):
        tifffile = _need("tifffile")
        _atomic_write(self.folder / self.name(index), lambda p: tifffile.imwrite(
            p, np.asarray(image, self.dtype), description=self.description,
            photometric="minisblack", metadata=None))

    def __setitem__(self, key, slices):
        start = 0 if key.start is None else key.start
        if self._pool is None:
            self._pool = ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="pybp-tiff")
        futures = [self._pool.submit(self.write, start + i, s) for i, s in enumerate(slices)]
        for future in futures:  # every write ends (whole or removed) before an error is raised
            future.exception()
        for future in futures:
            future.result()

    def __getstate__(self):
        return dict(self.__dict__, _pool=None)

    def close(self):
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


class TiffFolder(Output):
    """``FOLDER/slice_00042.tif`` for detector row 42, float32 (or float16)."""

    def __init__(self, path, shape, dtype, metadata, overwrite=False, resume=False):
        super().__init__(path, shape, dtype, metadata)
        _need("tifffile")
        folder = self.path
        _writable_folder(folder, create=True)
        self._remove_partial()
        description = json.dumps({k: self.metadata[k] for k in ("center", "filter", "input")
                                  if k in self.metadata})
        self.slices = TiffSlices(folder, self.metadata["first_row"], self.shape[0], self.dtype,
                                 description)
        if resume and (folder / METADATA).exists():
            _check_same(json.loads((folder / METADATA).read_text()), self.metadata, folder)
            self.scan_done()
        write_json(folder / METADATA, self.metadata)

    def scan_done(self):
        """Which slices are in the folder (written by this process or any other)."""
        self.done[:] = [(self.path / self.slices.name(i)).exists() for i in range(self.shape[0])]
        return self.done

    def writer(self):
        """What workers in other processes write with (a :class:`TiffSlices`)."""
        return self.slices

    def _remove_partial(self):
        """Temporary files of writers that died mid-slice (a killed run, a lost worker)."""
        for stale in self.path.glob(".slice_*.partial"):
            stale.unlink(missing_ok=True)

    def finish(self):
        self._remove_partial()  # every writer has ended

    def __setitem__(self, key, slices):
        start = 0 if key.start is None else key.start
        self.slices[key] = slices
        self.done[start:start + len(slices)] = True

    def close(self):
        self.slices.close()


class Hdf5File(Output):
    """Dataset ``/slices`` chunked per slice, the metadata as its attributes."""

    def __init__(self, path, shape, dtype, metadata, overwrite=False, resume=False):
        super().__init__(path, shape, dtype, metadata)
        self.h5py = _need("h5py")
        self.partial = _partial(self.path)
        self.file = None
        if resume and self.path.exists() and not self.partial.exists():
            with self.h5py.File(self.path, "r") as f:
                _check_same(json.loads(f["slices"].attrs[H5_METADATA]), self.metadata, self.path)
            self.done[:] = True  # finished before
            return
        if resume and self.partial.exists():
            try:
                self.file = self.h5py.File(self.partial, "r+")
                _check_same(json.loads(self.file["slices"].attrs[H5_METADATA]), self.metadata,
                            self.partial)
                self.done[:] = self.file["pybp_done"][()].astype(bool)
            except (OSError, KeyError) as exc:  # killed while flushing: start it again
                if self.file is not None:
                    self.file.close()
                self.file = None
                warnings.warn(f"output: {self.partial} from the interrupted run cannot be "
                              f"read ({exc}); starting it again", RuntimeWarning, stacklevel=3)
        if self.file is None:
            self.file = self.h5py.File(self.partial, "w")
            data = self.file.create_dataset("slices", self.shape, self.dtype,
                                            chunks=(1,) + self.shape[1:])
            data.attrs[H5_METADATA] = json.dumps(self.metadata)
            for key, value in self.metadata.items():
                if isinstance(value, (int, float, str)) and key != H5_METADATA:
                    data.attrs[key] = value
            self.file.create_dataset("pybp_done", (self.shape[0],), np.uint8)
            self.file.flush()
        self.data, self.record = self.file["slices"], self.file["pybp_done"]

    def __setitem__(self, key, slices):
        start = 0 if key.start is None else key.start
        self.data[start:start + len(slices)] = np.asarray(slices, self.dtype)
        self.file.flush()  # the data before the record that says it is there
        self.record[start:start + len(slices)] = 1
        self.file.flush()
        self.done[start:start + len(slices)] = True

    def finish(self):
        if self.file is not None and self.done.all():
            del self.file["pybp_done"]
            self.file.close()
            self.file = None
            os.replace(self.partial, self.path)

    def close(self):
        if self.file is not None:
            self.file.close()
            self.file = None


class NpyFile(Output):
    """A ``.npy`` stack built as a memory map ``NAME.partial``; which slices are in is
    kept in ``NAME.partial.done`` (one byte per slice); the metadata in ``NAME.json``."""

    def __init__(self, path, shape, dtype, metadata, overwrite=False, resume=False):
        super().__init__(path, shape, dtype, metadata)
        self.partial = _partial(self.path)
        self.record_path = self.path.with_name(self.path.name + ".partial.done")
        self.sidecar = self.path.with_suffix(".json")
        self.data = None
        if resume and self.sidecar.exists() and (self.path.exists() or self.partial.exists()):
            _check_same(json.loads(self.sidecar.read_text()), self.metadata, self.path)
            if self.path.exists() and not self.partial.exists():
                self.done[:] = True
                return
            if self.record_path.exists():
                self.data = np.lib.format.open_memmap(self.partial, mode="r+")
                record = np.fromfile(self.record_path, np.uint8)
                self.done[:len(record)] = record[:self.shape[0]].astype(bool)
        if self.data is None:
            write_json(self.sidecar, self.metadata)
            self.data = np.lib.format.open_memmap(self.partial, mode="w+", dtype=self.dtype,
                                                  shape=self.shape)
            np.zeros(self.shape[0], np.uint8).tofile(self.record_path)
        self.record = np.memmap(self.record_path, np.uint8, mode="r+", shape=(self.shape[0],))

    def __setitem__(self, key, slices):
        start = 0 if key.start is None else key.start
        np.copyto(self.data[start:start + len(slices)], slices, casting="unsafe")
        self.data.flush()
        self.record[start:start + len(slices)] = 1
        self.record.flush()
        self.done[start:start + len(slices)] = True

    def finish(self):
        if self.data is not None and self.done.all():
            self.close()
            os.replace(self.partial, self.path)
            self.record_path.unlink(missing_ok=True)

    def close(self):
        for name in ("data", "record"):
            value = getattr(self, name, None)
            if value is not None:
                value.flush()
                setattr(self, name, None)


KINDS = dict(tiff=TiffFolder, hdf5=Hdf5File, npy=NpyFile)


def open_output(path, shape, dtype="float32", metadata=None, overwrite=False, resume=False):
    """The output for ``shape = (n_slices, ny, nx)`` slices at ``path`` (a folder for
    TIFF slices, ``.h5``/``.hdf5``/``.nxs``, or ``.npy``), checked before any work: an
    existing output needs ``overwrite`` or ``resume``; the folder must be writable and
    hold the slices still to write."""
    if str(dtype) not in DTYPES:
        raise ValueError(f"dtype: expected one of {', '.join(DTYPES)}, got {dtype!r}")
    kind = check_output_path(path, overwrite, resume)
    metadata = dict(metadata or {}, first_row=int((metadata or {}).get("first_row", 0)))
    output = KINDS[kind](path, shape, dtype, metadata, overwrite, resume)
    folder = output.path if isinstance(output, TiffFolder) else output.path.parent
    check_free_space(folder, int((~output.done).sum()) * output.slice_bytes)
    return output


def stored_metadata(path):
    """What is stored with an output at ``path`` (finished or partial), or None."""
    path = Path(path)
    try:
        kind = output_kind(path)
    except ValueError:
        return None
    if kind == "tiff":
        found = path / METADATA
        return json.loads(found.read_text()) if found.exists() else None
    if kind == "npy":
        found = path.with_suffix(".json")
        return json.loads(found.read_text()) if found.exists() else None
    for candidate in (_partial(path), path):
        if candidate.exists():
            try:
                with _need("h5py").File(candidate, "r") as f:
                    return json.loads(f["slices"].attrs[H5_METADATA])
            except (OSError, KeyError):
                return None
    return None


def read_slices(path):
    """Slices written by pybp (or any TIFF folder, HDF5 ``/slices`` or ``.npy``), as an
    array-like ``(n_slices, ny, nx)`` and the metadata stored with them."""
    path = Path(path)
    kind = output_kind(path) if not path.is_dir() else "tiff"
    if kind == "tiff":
        metadata = json.loads((path / METADATA).read_text()) if (path / METADATA).exists() else {}
        files = sorted(path.glob("slice_*.tif"))
        if not files:
            raise ValueError(f"input: no slice_*.tif files in {path}")
        return TiffStack(files, "input"), metadata
    if kind == "npy":
        sidecar = path.with_suffix(".json")
        metadata = json.loads(sidecar.read_text()) if sidecar.exists() else {}
        return np.load(path, mmap_mode="r"), metadata
    h5file = _need("h5py").File(path, "r")
    if "slices" not in h5file:
        h5file.close()
        raise ValueError(f"input: {path} has no /slices dataset")
    data = h5file["slices"]
    return data, json.loads(data.attrs.get(H5_METADATA, "{}"))
