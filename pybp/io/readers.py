"""Scans from files: HDF5 in the DXchange layout, NeXus NXtomo, folders (or globs) of
TIFF projections, and ``.npy`` stacks. Each reader gives ``(n_angles, n_rows, n_bins)``
objects that read only the rows asked for (``data[:, first:stop]``), so
:func:`pybp.reconstruct` streams them a chunk of rows at a time.

h5py and tifffile come with ``pip install pybp[io]``; a missing dataset or an ambiguous
file gives a ``ValueError`` that lists what the file holds.
"""

from __future__ import annotations

import glob
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".nxs", ".nx", ".cxi")
TIFF_SUFFIXES = (".tif", ".tiff")
READ_THREADS = 8  # TIFF files read at once (one file per projection)
LISTED = 12       # datasets named in an error about a file's contents


def _need(module):
    try:
        return __import__(module)
    except ImportError:
        raise RuntimeError(f"reading these files needs {module}: pip install pybp[io]") from None


@dataclass
class Scan:
    """Projections ``(n_angles, n_rows, n_bins)``, their angles in radians, and flats
    and darks ``(n_frames, n_rows, n_bins)`` (None for normalised data); ``source``
    says where each came from. ``close()`` (or ``with``) closes the files."""

    projections: object
    angles: np.ndarray
    flats: object = None
    darks: object = None
    source: dict = field(default_factory=dict)
    files: list = field(default_factory=list)

    @property
    def shape(self):
        return tuple(int(n) for n in self.projections.shape)

    def close(self):
        for f in self.files:
            f.close()
        self.files.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Frames:
    """Frames ``indices`` of a 3-D dataset (NXtomo keeps projections, flats and darks in
    one), read as contiguous runs of frames: ``frames[:, rows]`` and ``frames[i]``."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, np.asarray(indices, np.int64)
        self.shape = (len(self.indices),) + tuple(dataset.shape[1:])
        self.dtype = dataset.dtype
        breaks = np.flatnonzero(np.diff(self.indices) != 1) + 1
        self.runs = [(int(run[0]), int(run[-1]) + 1)
                     for run in np.split(self.indices, breaks) if len(run)]

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        head, rest = key[0], key[1:]
        if isinstance(head, (int, np.integer)):
            return self.dataset[(int(self.indices[head]),) + rest]
        if head != slice(None):
            raise IndexError("Frames: index the first axis with ':' or one integer")
        parts = [np.asarray(self.dataset[(slice(a, b),) + rest]) for a, b in self.runs]
        return np.concatenate(parts) if len(parts) > 1 else parts[0]


class DirectRows:
    """An HDF5 dataset ``(n_frames, n_rows, n_bins)`` stored without filters, either in
    one piece or in chunks of whole rows ``(1, r, n_bins)``, read straight from the
    file at the byte offsets HDF5 reports, on :data:`READ_THREADS` threads. h5py reads
    on one thread under one lock: about 1.1 GB/s from the page cache on the H100
    machine; :func:`direct_rows` returns None for any other layout, which h5py reads."""

    def __init__(self, dataset, pieces, rows_per_piece):
        self.path, self.shape, self.dtype = dataset.file.filename, dataset.shape, dataset.dtype
        self.pieces, self.rows_per_piece = pieces, rows_per_piece  # frame, piece -> offset
        self.row_bytes = self.shape[2] * self.dtype.itemsize

    def _read(self, fd, frame, first, stop, out):
        row = first
        while row < stop:
            piece, within = divmod(row, self.rows_per_piece)
            take = min(stop, (piece + 1) * self.rows_per_piece) - row
            view = out[row - first:row - first + take].reshape(-1).view(np.uint8)
            offset = int(self.pieces[frame, piece]) + within * self.row_bytes
            done = 0
            while done < view.nbytes:  # pread may return less than asked
                got = os.preadv(fd, [view[done:]], offset + done)
                if got <= 0:
                    raise OSError(f"input: {self.path} ends early (frame {frame}, row {row})")
                done += got
            row += take

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        one = isinstance(key[0], (int, np.integer))
        frames = range(*key[0].indices(self.shape[0])) if isinstance(key[0], slice) else \
            range(int(key[0]) % self.shape[0], int(key[0]) % self.shape[0] + 1) if one else None
        rows = key[1] if len(key) > 1 else slice(None)
        if frames is None or not isinstance(rows, slice) or rows.step not in (None, 1):
            raise IndexError("DirectRows: index as [frames, rows] with slices or one frame")
        first, stop, _ = rows.indices(self.shape[1])
        stop = max(first, stop)
        out = np.empty((len(frames), stop - first, self.shape[2]), self.dtype)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            with ThreadPoolExecutor(READ_THREADS) as pool:
                for future in [pool.submit(self._read, fd, f, first, stop, out[k])
                               for k, f in enumerate(frames)]:
                    future.result()
        finally:
            os.close(fd)
        return out[0] if one else out


def direct_rows(dataset):
    """A :class:`DirectRows` for ``dataset`` where its layout allows, else None."""
    import h5py

    try:
        plist = dataset.id.get_create_plist()
        if len(dataset.shape) != 3 or plist.get_nfilters() or not dataset.dtype.isnative \
                or dataset.dtype.kind not in "iuf" or dataset.file.driver != "sec2" \
                or dataset.is_virtual or dataset.external:
            return None
        n_frames, n_rows, n_bins = dataset.shape
        frame_bytes = n_rows * n_bins * dataset.dtype.itemsize
        if plist.get_layout() == h5py.h5d.CONTIGUOUS:
            base = dataset.id.get_offset()
            if base is None:  # never written
                return None
            pieces = base + frame_bytes * np.arange(n_frames, dtype=np.int64)[:, None]
            return DirectRows(dataset, pieces, n_rows)
        chunks = dataset.chunks
        if plist.get_layout() != h5py.h5d.CHUNKED or chunks[0] != 1 or chunks[2] != n_bins:
            return None
        per_frame = -(-n_rows // chunks[1])
        if dataset.id.get_num_chunks() != n_frames * per_frame:
            return None  # some chunks never written: h5py gives their fill value
        pieces = np.empty((n_frames, per_frame), np.int64)
        for i in range(n_frames * per_frame):
            info = dataset.id.get_chunk_info(i)
            pieces[info.chunk_offset[0], info.chunk_offset[1] // chunks[1]] = info.byte_offset
        return DirectRows(dataset, pieces, chunks[1])
    except (AttributeError, TypeError, ValueError, RuntimeError, OSError):
        return None  # an h5py or HDF5 without these calls


def _natural_key(path):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def tiff_files(spec, name):
    """The TIFF files of a folder or a glob, in natural order (2 before 10)."""
    text = str(spec)
    if os.path.isdir(text):
        files = [p for p in Path(text).iterdir() if p.suffix.lower() in TIFF_SUFFIXES]
    else:
        files = [Path(p) for p in glob.glob(text)]
    if not files:
        raise ValueError(f"{name}: no TIFF files in {text!r}")
    return sorted(files, key=_natural_key)


class TiffStack:
    """One 2-D TIFF image per frame, as ``(n_frames, n_rows, n_bins)``. Uncompressed
    images are read row range by row range from their offset in the file; compressed
    ones are decoded whole each time rows are asked for (slower: a whole frame per
    chunk of rows)."""

    def __init__(self, files, name):
        tifffile = _need("tifffile")
        self.files, self.name = list(files), name
        with tifffile.TiffFile(self.files[0]) as tif:
            page = tif.pages[0]
            shape, self.dtype = tuple(page.shape), np.dtype(page.dtype)
        if len(shape) != 2:
            raise ValueError(f"{name}: {self.files[0]} holds a {len(shape)}-D image "
                             f"{shape}; expected one 2-D image per file")
        self.shape = (len(self.files),) + shape
        self._offsets = [None] * len(self.files)

    def __len__(self):
        return self.shape[0]

    def _layout(self, i):
        """``(offset, shape, dtype)`` of file ``i``'s image when it is stored
        uncompressed in one piece, else ``(None, shape, dtype)``."""
        if self._offsets[i] is None:
            tifffile = _need("tifffile")
            with tifffile.TiffFile(self.files[i]) as tif:
                page = tif.pages[0]
                plain = page.is_contiguous and np.dtype(page.dtype).isnative
                offset = page.dataoffsets[0] if plain else None
                self._offsets[i] = (offset, tuple(page.shape), np.dtype(page.dtype))
        return self._offsets[i]

    def _frame_rows(self, i, rows):
        offset, shape, dtype = self._layout(i)
        if shape != self.shape[1:] or dtype != self.dtype:
            raise ValueError(f"{self.name}: {self.files[i]} is {shape} {dtype}, the first "
                             f"file {self.shape[1:]} {self.dtype}")
        if offset is None:
            return _need("tifffile").imread(self.files[i])[rows]
        first, stop, step = rows.indices(shape[0])
        stop = max(first, stop)
        data = np.fromfile(self.files[i], dtype, count=(stop - first) * shape[1],
                           offset=offset + first * shape[1] * dtype.itemsize)
        return data.reshape(-1, shape[1])[::step]

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        head = key[0]
        rows = key[1] if len(key) > 1 else slice(None)
        if isinstance(rows, (int, np.integer)):
            rows = slice(int(rows), int(rows) + 1)
            squeeze = True
        else:
            squeeze = False
        if isinstance(head, (int, np.integer)):
            frame = self._frame_rows(int(head), rows)
            return frame[0] if squeeze else frame
        indices = range(*head.indices(len(self.files)))
        with ThreadPoolExecutor(READ_THREADS) as pool:
            frames = list(pool.map(lambda i: self._frame_rows(i, rows), indices))
        out = np.stack(frames)
        return out[:, 0] if squeeze else out


def read_angles(path=None, angle_range=None, n_angles=None, name="angles"):
    """Radians from a text file of degrees (one per line), or ``n_angles`` even steps
    over ``angle_range`` degrees."""
    if path is not None:
        try:
            degrees = np.loadtxt(path, dtype=np.float64, ndmin=1)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{name}: cannot read {path}: {exc}") from None
        if len(degrees) != n_angles:
            raise ValueError(f"{name}: {path} has {len(degrees)} angles; the projections are "
                             f"{n_angles}")
        return np.deg2rad(degrees)
    if not angle_range or angle_range <= 0:
        raise ValueError(f"angle-range: expected a positive number of degrees, got {angle_range}")
    return np.deg2rad(np.arange(n_angles) * (float(angle_range) / n_angles))


def _contents(h5file):
    """Text naming the datasets in an HDF5 file, with their shapes."""
    found = []
    h5file.visititems(lambda name, obj: found.append(f"/{name} {obj.shape} {obj.dtype}")
                      if hasattr(obj, "shape") else None)
    more = f" and {len(found) - LISTED} more" if len(found) > LISTED else ""
    return ", ".join(found[:LISTED]) + more if found else "no datasets"


def _nx_class(obj):
    value = obj.attrs.get("NX_class")
    return value.decode() if isinstance(value, bytes) else value


def _text(value):
    value = value[()] if hasattr(value, "shape") else value
    value = value.decode() if isinstance(value, bytes) else str(value)
    return value.strip()


def _nxtomo_entries(h5file):
    entries = []

    def visit(name, obj):
        if _nx_class(obj) in ("NXentry", "NXsubentry") and "definition" in obj \
                and _text(obj["definition"]).lower() == "nxtomo":
            entries.append(name)
    h5file.visititems(visit)
    return entries


def _find_class(group, nx_class, having):
    """Paths under ``group`` of the NX class holding dataset ``having``."""
    found = []
    group.visititems(lambda name, obj: found.append(name)
                     if _nx_class(obj) == nx_class and having in obj else None)
    return found


def _degrees_or_radians(dataset):
    units = _text(dataset.attrs.get("units", "degree")).lower()
    values = np.asarray(dataset[()], np.float64).ravel()
    return values if units.startswith("rad") else np.deg2rad(values)


def _open_nxtomo(h5file, path, entry):
    group = h5file[entry]
    detectors = _find_class(group, "NXdetector", "data")
    if len(detectors) != 1:
        what = "no NXdetector with data" if not detectors else f"NXdetectors {detectors}"
        raise ValueError(f"input: NXtomo entry /{entry} of {path} has {what}; it holds "
                         f"{_contents(h5file)}")
    detector = group[detectors[0]]
    data = detector["data"]
    keys = detector.get("image_key")
    if keys is None:
        raise ValueError(f"input: /{entry}/{detectors[0]} of {path} has no image_key; it "
                         f"holds {_contents(h5file)}")
    keys = np.asarray(keys[()]).ravel()
    samples = _find_class(group, "NXsample", "rotation_angle")
    if len(samples) != 1:
        raise ValueError(f"input: NXtomo entry /{entry} of {path} has "
                         f"{'no' if not samples else len(samples)} NXsample with rotation_angle")
    angles = _degrees_or_radians(group[samples[0]]["rotation_angle"])
    if len(keys) != data.shape[0] or len(angles) != data.shape[0]:
        raise ValueError(f"input: /{entry} of {path}: {data.shape[0]} frames, "
                         f"{len(keys)} image keys, {len(angles)} rotation angles")
    projections, flats, darks = (np.flatnonzero(keys == k) for k in (0, 1, 2))
    if not len(projections):
        raise ValueError(f"input: /{entry} of {path} has no projections (image_key 0)")
    where = f"{path}:/{entry}/{detectors[0]}/data"
    data = direct_rows(data) or data
    return Scan(Frames(data, projections), angles[projections],
                Frames(data, flats) if len(flats) else None,
                Frames(data, darks) if len(darks) else None,
                source=dict(format="NXtomo", projections=where))


def _open_dxchange(h5file, path):
    if "exchange/data" not in h5file:
        raise ValueError(f"input: {path} is neither DXchange (no /exchange/data) nor NXtomo "
                         f"(no NXentry with definition NXtomo); it holds {_contents(h5file)}")
    group = h5file["exchange"]
    theta = group.get("theta")
    data = direct_rows(group["data"]) or group["data"]
    return Scan(data, None if theta is None else np.deg2rad(np.asarray(theta[()], np.float64)),
                group.get("data_white"), group.get("data_dark"),
                source=dict(format="DXchange", projections=f"{path}:/exchange/data"))


def _open_hdf5(path, entry=None):
    """DXchange or NXtomo; ``entry`` names one NXtomo entry of several."""
    h5py = _need("h5py")
    try:
        h5file = h5py.File(path, "r")
    except OSError as exc:
        raise ValueError(f"input: cannot open {path} as HDF5: {exc}") from None
    try:
        entries = [entry] if entry else _nxtomo_entries(h5file)
        if entry and entry not in h5file:
            raise ValueError(f"input: {path} has no /{entry}; it holds {_contents(h5file)}")
        if len(entries) > 1:
            raise ValueError(f"input: {path} holds {len(entries)} NXtomo entries "
                             f"({', '.join('/' + e for e in entries)}); name one as "
                             f"{path}:/ENTRY")
        scan = _open_nxtomo(h5file, path, entries[0]) if entries else _open_dxchange(h5file, path)
    except BaseException:
        h5file.close()
        raise
    scan.files.append(h5file)
    return scan


def _open_npy(path, name):
    try:
        data = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as exc:
        raise ValueError(f"{name}: cannot read {path} as .npy: {exc}") from None
    return data


def _frames_from(spec, name):
    """Flats or darks given on their own: a .npy file, or a TIFF folder or glob."""
    text = str(spec)
    if text.lower().endswith(".npy"):
        return _open_npy(text, name)
    return TiffStack(tiff_files(text, name), name)


def open_scan(path, flats=None, darks=None, angles=None, angle_range=None) -> Scan:
    """Open a scan: ``path`` is an HDF5 file (DXchange or NXtomo; ``FILE:/ENTRY`` picks
    one NXtomo entry), a ``.npy`` stack ``(n_angles, n_rows, n_bins)``, or a folder or
    glob of TIFF projections. ``flats`` and ``darks`` (``.npy``, TIFF folder or glob)
    replace or supply the references; ``angles`` (text file, degrees) or ``angle_range``
    (degrees, even steps from 0) replace or supply the angles."""
    text = str(path)
    entry = None
    if ":/" in text and not os.path.exists(text):
        text, entry = text.split(":/", 1)
    suffix = Path(text).suffix.lower()
    if not any(ch in text for ch in "*?[") and not os.path.exists(text):
        raise ValueError(f"input: {text} does not exist")
    if suffix in HDF5_SUFFIXES:
        scan = _open_hdf5(text, entry)
    elif suffix == ".npy":
        scan = Scan(_open_npy(text, "input"), None, source=dict(format="npy", projections=text))
    elif os.path.isdir(text) or suffix in TIFF_SUFFIXES or any(ch in text for ch in "*?["):
        scan = Scan(TiffStack(tiff_files(text, "input"), "input"), None,
                    source=dict(format="TIFF", projections=text))
    else:
        raise ValueError(f"input: {text}: expected an HDF5 file ({', '.join(HDF5_SUFFIXES)}), "
                         f"a .npy file, or a folder or glob of TIFF files")
    try:
        _complete(scan, flats, darks, angles, angle_range)
    except BaseException:
        scan.close()
        raise
    return scan


def _complete(scan, flats, darks, angles, angle_range):
    shape = scan.projections.shape
    if len(shape) != 3:
        raise ValueError(f"input: expected projections (n_angles, n_rows, n_bins), got shape "
                         f"{tuple(shape)}")
    if flats is not None:
        scan.flats, scan.source["flats"] = _frames_from(flats, "flats"), str(flats)
    if darks is not None:
        scan.darks, scan.source["darks"] = _frames_from(darks, "darks"), str(darks)
    if (scan.flats is None) != (scan.darks is None):
        missing = "darks" if scan.darks is None else "flats"
        raise ValueError(f"{missing}: the input has {'flats' if missing == 'darks' else 'darks'} "
                         f"but no {missing}; give --{missing}")
    if angles is not None or angle_range is not None:
        scan.angles = read_angles(angles, angle_range, shape[0])
        scan.source["angles"] = str(angles) if angles is not None else f"0..{angle_range} deg"
    elif scan.angles is None:
        raise ValueError(f"angles: {scan.source['format']} input has no angles; give "
                         "--angles FILE (degrees, one per line) or --angle-range DEG")
    elif len(scan.angles) != shape[0]:
        raise ValueError(f"angles: the file has {len(scan.angles)} angles for {shape[0]} "
                         "projections")
    scan.angles = np.asarray(scan.angles, np.float64)
