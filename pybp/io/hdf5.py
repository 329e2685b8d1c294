"""HDF5 scans: the DXchange layout and NeXus NXtomo (found by NX class), and rows of
unfiltered datasets read straight from the file (docs/design.md, section 3)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from pybp.io.scan import READ_THREADS, FrameRuns, Scan, need

LISTED = 12  # datasets named in an error about a file's contents


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
        """``[frames, rows]``: frames a slice (any step) or one index; rows a slice
        (step 1) or one index, as h5py would give them."""
        key = key if isinstance(key, tuple) else (key,)
        if len(key) > 2 or any(k is Ellipsis for k in key):
            raise IndexError("DirectRows: index as [frames, rows]")
        one = isinstance(key[0], (int, np.integer))
        frames = range(*key[0].indices(self.shape[0])) if isinstance(key[0], slice) else \
            range(int(key[0]) % self.shape[0], int(key[0]) % self.shape[0] + 1) if one else None
        rows = key[1] if len(key) > 1 else slice(None)
        one_row = isinstance(rows, (int, np.integer))
        if one_row:  # one detector row (the raw-counts check samples one)
            if not -self.shape[1] <= rows < self.shape[1]:
                raise IndexError(f"DirectRows: row {rows} of {self.shape[1]}")
            rows = slice(int(rows) % self.shape[1], int(rows) % self.shape[1] + 1)
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
        if one_row:
            out = out[:, 0]
        return out[0] if one else out


def direct_rows(dataset):
    """A :class:`DirectRows` for ``dataset`` where its layout allows
    (:func:`byte_offsets`), else None."""
    found = byte_offsets(dataset)
    return None if found is None else DirectRows(dataset, *found)


def byte_offsets(dataset):
    """``(offsets, rows)`` of a dataset ``(n_frames, n_rows, n_bins)`` stored without
    filters, in one piece or in chunks of whole rows ``(1, rows, n_bins)`` all placed in
    the file: ``offsets[frame, piece]``, the byte offset of each piece of ``rows`` rows
    of each frame; else None (that dataset goes through h5py). The chunks' offsets come
    from one walk of HDF5's chunk index (``chunk_iter``): looked up one by one, 2048
    chunks took 0.15 s on the H100 machine, 8192 took 4 s here (the square of them)."""
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
            return base + frame_bytes * np.arange(n_frames, dtype=np.int64)[:, None], n_rows
        chunks = dataset.chunks
        if plist.get_layout() != h5py.h5d.CHUNKED or chunks[0] != 1 or chunks[2] != n_bins:
            return None
        per_frame = -(-n_rows // chunks[1])
        if dataset.id.get_num_chunks() != n_frames * per_frame:
            return None  # some chunks never written: h5py gives their fill value
        pieces = np.empty((n_frames, per_frame), np.int64)

        def place(info):
            pieces[info.chunk_offset[0], info.chunk_offset[1] // chunks[1]] = info.byte_offset
        if hasattr(dataset.id, "chunk_iter"):  # one pass over the chunk index
            dataset.id.chunk_iter(place)
        else:  # HDF5 before 1.14: get_chunk_info(i) walks the index to chunk i each time
            for i in range(n_frames * per_frame):
                place(dataset.id.get_chunk_info(i))
        return pieces, chunks[1]
    except (AttributeError, TypeError, ValueError, RuntimeError, OSError):
        return None  # an h5py or HDF5 without these calls


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
    """Radians, and whether degrees were assumed (no ``units`` attribute)."""
    units = dataset.attrs.get("units")
    values = np.asarray(dataset[()], np.float64).ravel()
    if units is not None and _text(units).lower().startswith("rad"):
        return values, False
    return np.deg2rad(values), units is None


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
    angles, assumed = _degrees_or_radians(group[samples[0]]["rotation_angle"])
    if len(keys) != data.shape[0] or len(angles) != data.shape[0]:
        raise ValueError(f"input: /{entry} of {path}: {data.shape[0]} frames, "
                         f"{len(keys)} image keys, {len(angles)} rotation angles")
    projections, flats, darks = (np.flatnonzero(keys == k) for k in (0, 1, 2))
    if not len(projections):
        raise ValueError(f"input: /{entry} of {path} has no projections (image_key 0)")
    where = f"{path}:/{entry}/{detectors[0]}/data"
    data = direct_rows(data) or data
    return Scan(FrameRuns(data, projections), angles[projections],
                FrameRuns(data, flats) if len(flats) else None,
                FrameRuns(data, darks) if len(darks) else None,
                source=dict(format="NXtomo", projections=where,
                            angles=f"{path}:/{entry}/{samples[0]}/rotation_angle"),
                angles_assumed_degrees=assumed)


def _open_dxchange(h5file, path):
    if "exchange/data" not in h5file:
        raise ValueError(f"input: {path} is neither DXchange (no /exchange/data) nor NXtomo "
                         f"(no NXentry with definition NXtomo); it holds {_contents(h5file)}")
    group = h5file["exchange"]
    theta = group.get("theta")
    data = direct_rows(group["data"]) or group["data"]
    # DXchange's theta is in degrees; a units attribute, where there is one, says so
    angles, assumed = _degrees_or_radians(theta) if theta is not None else (None, False)
    return Scan(data, angles, group.get("data_white"), group.get("data_dark"),
                source=dict(format="DXchange", projections=f"{path}:/exchange/data",
                            angles=f"{path}:/exchange/theta"),
                angles_assumed_degrees=assumed)


def open_hdf5(path, entry=None):
    """DXchange or NXtomo; ``entry`` names one NXtomo entry of several."""
    h5py = need("h5py")
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
