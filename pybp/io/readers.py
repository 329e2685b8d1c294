"""Scans from files: HDF5 in the DXchange layout and NeXus NXtomo (pybp/io/hdf5.py),
folders (or globs) of TIFF projections, and ``.npy`` stacks. Each reader gives ``(n_angles, n_rows, n_bins)``
objects that read only the rows asked for (``data[:, first:stop]``), so
:func:`pybp.reconstruct` streams them a chunk of rows at a time.

h5py and tifffile come with pybp's ``io`` extra; a missing dataset or an ambiguous
file gives a ``ValueError`` that lists what the file holds.
"""

from __future__ import annotations

import glob
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from struct import error as struct_error

import numpy as np

from pybp import checks
from pybp.io.hdf5 import open_hdf5
from pybp.io.scan import READ_THREADS, Scan, need

HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".nxs", ".nx", ".cxi")
TIFF_SUFFIXES = (".tif", ".tiff")
ANGLE_UNITS = ("deg", "rad")
# Degrees that span no more than this look like radians (a full turn is 6.28 radians).
RADIAN_SPAN = 2 * np.pi * 1.01


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
        self.files, self.name = list(files), name
        with _tiff(self.files[0], name) as tif:
            page = tif.pages[0]
            shape, self.dtype = tuple(page.shape), np.dtype(page.dtype)
        if len(shape) != 2:
            raise ValueError(f"{name}: {self.files[0]} holds a {len(shape)}-D image "
                             f"{shape}; expected one 2-D image per file")
        self.shape = (len(self.files),) + shape
        self._offsets = [None] * len(self.files)

    def __len__(self):
        return self.shape[0]

    def compressed_sizes(self):
        """Each file's size where the images are compressed (a row of one is the whole
        image decoded: the input's hash takes the sizes instead, pybp.io.scan.sampled);
        None where they are stored in one piece."""
        if self._layout(0)[0] is not None:
            return None
        return np.array([os.path.getsize(f) for f in self.files], np.int64)

    def _layout(self, i):
        """``(offset, shape, dtype)`` of file ``i``'s image when it is stored
        uncompressed in one piece, else ``(None, shape, dtype)``."""
        if self._offsets[i] is None:
            with _tiff(self.files[i], self.name) as tif:
                page = tif.pages[0]
                plain = page.is_contiguous and np.dtype(page.dtype).isnative
                offset = page.dataoffsets[0] if plain else None
                self._offsets[i] = (offset, tuple(page.shape), np.dtype(page.dtype))
        return self._offsets[i]

    def _frame_rows(self, i, rows, out=None):
        """Rows ``rows`` of frame ``i``; into ``out`` (C-contiguous, of the stack's dtype)
        where given, straight from the file where the frame is stored in one piece."""
        offset, shape, dtype = self._layout(i)
        if shape != self.shape[1:] or dtype != self.dtype:
            raise ValueError(f"{self.name}: {self.files[i]} is {shape} {dtype}, the first "
                             f"file {self.shape[1:]} {self.dtype}")
        first, stop, step = rows.indices(shape[0])
        stop = max(first, stop)
        if offset is not None and out is not None and step == 1:
            with open(self.files[i], "rb") as file:
                file.seek(offset + first * shape[1] * dtype.itemsize)
                got = file.readinto(memoryview(out).cast("B"))
            if got != out.nbytes:
                raise ValueError(f"{self.name}: {self.files[i]} ends before its image does")
            return out
        if offset is None:
            with _tiff(self.files[i], self.name) as tif:
                data = tif.pages[0].asarray()[rows]
        else:
            data = np.fromfile(self.files[i], dtype, count=(stop - first) * shape[1],
                               offset=offset + first * shape[1] * dtype.itemsize)
            data = data.reshape(-1, shape[1])[::step]
        if out is not None:
            out[...] = data
        return data

    def read_direct(self, destination, source_sel, dest_sel):
        """As h5py's ``Dataset.read_direct``, for the selections pybp makes: frames and
        rows (``source_sel``, two slices) into ``destination[dest_sel]`` (all frames,
        the first rows), ``destination`` C-contiguous of the stack's dtype; each frame's
        rows read from its file straight into it where stored in one piece."""
        frames, rows = source_sel
        for k, i in enumerate(range(*frames.indices(len(self.files)))):
            self._frame_rows(i, rows, out=destination[k][dest_sel[1:]])

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


class _tiff:
    """``tifffile.TiffFile`` of one image, a file it cannot read a ``ValueError`` that
    names it (not tifffile's ``IndexError`` of a truncated file)."""

    def __init__(self, path, name):
        self.path, self.name, self.tif = path, name, None

    def __enter__(self):
        try:
            self.tif = need("tifffile").TiffFile(self.path)
            self.tif.pages[0]
        except (OSError, ValueError, IndexError, KeyError, EOFError, struct_error) as exc:
            if self.tif is not None:
                self.tif.close()
            raise ValueError(f"{self.name}: cannot read {self.path} as a TIFF image "
                             f"({exc or type(exc).__name__})") from None
        return self.tif

    def __exit__(self, kind, exc, traceback):
        self.tif.close()
        if kind is not None and issubclass(kind, (IndexError, KeyError, EOFError, struct_error)):
            raise ValueError(f"{self.name}: cannot read {self.path} as a TIFF image "
                             f"({exc or kind.__name__})") from None


def read_angles(path=None, angle_range=None, n_angles=None, name="angles", unit=None):
    """Radians from a text file (one angle per line), or ``n_angles`` even steps over
    ``angle_range``; both in ``unit`` (``"deg"`` or ``"rad"``; None: degrees, and
    :func:`check_angles` then asks about a span that looks like radians)."""
    scale = 1.0 if unit == "rad" else np.pi / 180
    if path is not None:
        try:
            values = np.loadtxt(path, dtype=np.float64, ndmin=1)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{name}: cannot read {path}: {exc}") from None
        if len(values) != n_angles:
            raise ValueError(f"{name}: {path} has {len(values)} angles for {n_angles} "
                             "projections; give one angle per projection, in the "
                             "projections' order")
        return values * scale
    if angle_range is None or not np.isfinite(angle_range) or angle_range <= 0:
        raise ValueError(f"angle-range: expected a positive number of "
                         f"{'radians' if unit == 'rad' else 'degrees'}, got {angle_range}")
    return np.arange(n_angles) * (float(angle_range) * scale / n_angles)


def check_angles(angles, where, assumed_degrees):
    """Angles (radians) that can be reconstructed: numbers, two distinct values at
    least, and, where degrees were assumed, a span that does not look like radians."""
    angles = np.asarray(angles, np.float64)
    bad = int((~np.isfinite(angles)).sum())
    if bad:
        raise ValueError(f"angles: {bad} of the {len(angles)} angles in {where} are not "
                         "numbers (NaN or Inf)")
    if checks.distinct_angles(angles) < 2:
        raise ValueError(f"angles: {where} holds {checks.distinct_angles(angles)} distinct angle(s); "
                         "a reconstruction needs projections at two angles at least")
    span = float(np.degrees(np.ptp(angles)))
    if assumed_degrees and span <= RADIAN_SPAN:
        raise ValueError(f"angles: {where} spans {span:.4g}, read as degrees (its unit is "
                         "not given); that looks like radians: pass --angle-unit rad, or "
                         f"--angle-unit deg if the scan covers {span:.4g} degrees")
    return angles


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


def open_scan(path, flats=None, darks=None, angles=None, angle_range=None,
              angle_unit=None) -> Scan:
    """Open a scan: ``path`` is an HDF5 file (DXchange or NXtomo; ``FILE:/ENTRY`` picks
    one NXtomo entry), a ``.npy`` stack ``(n_angles, n_rows, n_bins)``, or a folder or
    glob of TIFF projections. ``flats`` and ``darks`` (``.npy``, TIFF folder or glob)
    replace or supply the references; ``angles`` (text file, degrees) or ``angle_range``
    (even steps from 0) replace or supply the angles, in degrees or, with
    ``angle_unit="rad"``, radians; ``angle_unit`` also says the unit of angles in a
    file that does not (DXchange's theta, NXtomo without units). Where degrees are
    assumed, angles spanning less than a full turn's radians are refused."""
    if angle_unit not in (None,) + ANGLE_UNITS:
        raise ValueError(f"angle-unit: expected one of {', '.join(ANGLE_UNITS)}, got "
                         f"{angle_unit!r}")
    text = str(path)
    entry = None
    if ":/" in text and not os.path.exists(text):
        text, entry = text.split(":/", 1)
    suffix = Path(text).suffix.lower()
    if not any(ch in text for ch in "*?[") and not os.path.exists(text):
        raise ValueError(f"input: {text} does not exist")
    if suffix in HDF5_SUFFIXES:
        scan = open_hdf5(text, entry)
    elif suffix == ".npy":
        scan = Scan(_open_npy(text, "input"), None, source=dict(format="npy", projections=text))
    elif os.path.isdir(text) or suffix in TIFF_SUFFIXES or any(ch in text for ch in "*?["):
        scan = Scan(TiffStack(tiff_files(text, "input"), "input"), None,
                    source=dict(format="TIFF", projections=text))
    else:
        raise ValueError(f"input: {text}: expected an HDF5 file ({', '.join(HDF5_SUFFIXES)}), "
                         f"a .npy file, or a folder or glob of TIFF files")
    try:
        _complete(scan, flats, darks, angles, angle_range, angle_unit)
    except BaseException:
        scan.close()
        raise
    absolute = {name: None if value is None else os.path.abspath(str(value))
                for name, value in dict(path=path, flats=flats, darks=darks, angles=angles).items()}
    scan.opened_with = dict(absolute, angle_range=angle_range, angle_unit=angle_unit)  # for workers on other hosts
    return scan


def _complete(scan, flats, darks, angles, angle_range, angle_unit):
    shape = scan.projections.shape
    if len(shape) != 3:
        raise ValueError(f"input: expected projections (n_angles, n_rows, n_bins), got shape "
                         f"{tuple(shape)}")
    if 0 in shape:
        raise ValueError(f"input: {scan.source['projections']} holds no projections (shape "
                         f"{tuple(shape)})")
    if flats is not None:
        scan.flats, scan.source["flats"] = _frames_from(flats, "flats"), str(flats)
    if darks is not None:
        scan.darks, scan.source["darks"] = _frames_from(darks, "darks"), str(darks)
    if scan.flats is None and scan.darks is not None:  # (flats alone: a dark of zero)
        raise ValueError("flats: the input has darks but no flats; give --flats")
    for name in ("flats", "darks"):
        frames = getattr(scan, name)
        if frames is not None and (len(frames.shape) not in (2, 3)
                                   or tuple(frames.shape[-2:]) != tuple(shape[1:])):
            raise ValueError(f"{name}: frames of shape {tuple(frames.shape)} for projections "
                             f"of {tuple(shape[1:])} (rows x bins)")
    where = scan.source.get("angles", "the file")
    if angles is not None or angle_range is not None:
        scan.angles = read_angles(angles, angle_range, shape[0], unit=angle_unit)
        unit = "rad" if angle_unit == "rad" else "deg"
        where = str(angles) if angles is not None else f"--angle-range {angle_range}"
        scan.source["angles"] = str(angles) if angles is not None else f"0..{angle_range} {unit}"
        scan.angles_assumed_degrees = angle_unit is None
    elif scan.angles is not None and scan.angles_assumed_degrees and angle_unit is not None:
        if angle_unit == "rad":
            scan.angles = np.degrees(scan.angles)  # the file's values were radians
        scan.angles_assumed_degrees = False
    elif scan.angles is None:
        raise ValueError(f"angles: {scan.source['format']} input has no angles; give "
                         "--angles FILE (degrees, one per line) or --angle-range DEG")
    elif len(scan.angles) != shape[0]:
        raise ValueError(f"angles: the file has {len(scan.angles)} angles for {shape[0]} "
                         "projections; give one per projection with --angles FILE")
    scan.angles = check_angles(scan.angles, where, scan.angles_assumed_degrees)
