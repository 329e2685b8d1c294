"""What every reader gives: a :class:`Scan` of projections, angles, flats and darks,
:class:`FrameRuns` (chosen frames of one dataset, read as runs), and :func:`need` for
the optional packages (h5py, tifffile) that the file formats take."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

READ_THREADS = 8  # files (or runs of frames) read at once
# Detector rows of every projection in the input's hash, beside its first, middle and
# last projections whole: a projection changed changes the hash (the first, middle and
# last alone missed projection 100, and a resume mixed two inputs). A row of each of
# 360 projections of 1024 from an HDF5 file took 13 ms here: 2 rows of 2048 projections
# about 0.15 s, under 1% of a 2048^3 run. Compressed data would be decoded whole for a
# row: there the size of each projection's chunk or file stands in.
FINGERPRINT_ROWS = 2
FINGERPRINT = "sampled-1:"  # the hash's rule, before it: a hash of another rule says so


def need(module):
    try:
        return __import__(module)
    except ImportError:
        raise RuntimeError(f"reading these files needs {module} (pybp's io extra): "
                           f"pip install {module}") from None


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
    angles_assumed_degrees: bool = False  # read from a place that does not say the unit
    files: list = field(default_factory=list)
    opened_with: dict = field(default_factory=dict)  # open_scan's arguments, paths absolute

    @property
    def shape(self):
        return tuple(int(n) for n in self.projections.shape)

    def fingerprint(self) -> str:
        """A hash of the data's shape and type, of its first, middle and last
        projections whole, of every projection (:func:`sampled`) and of the first flat
        and dark: a resumed run refuses input that changed."""
        digest = hashlib.sha1(repr((self.shape, str(self.projections.dtype))).encode())
        n = self.shape[0]
        frames = [self.projections[i] for i in sorted({0, n // 2, n - 1})]
        frames += sampled(self.projections)
        frames += [f[0] for f in (self.flats, self.darks) if f is not None]
        for frame in frames:
            digest.update(np.ascontiguousarray(frame).tobytes())
        return FINGERPRINT + digest.hexdigest()

    def close(self):
        for f in self.files:
            f.close()
        self.files.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def sampled(projections) -> list:
    """What of every projection the input's hash takes: :data:`FINGERPRINT_ROWS`
    detector rows, each one read; for a compressed HDF5 dataset the size and place of
    each chunk, and for compressed TIFF files each file's size (a row of either is the
    whole projection decoded)."""
    stand_in = getattr(projections, "compressed_sizes", None) or (
        lambda: _chunk_sizes(projections))
    sizes = stand_in()
    if sizes is not None:
        return [sizes]
    n_rows = projections.shape[1]
    rows = sorted({int(r) for r in np.linspace(0, n_rows - 1, FINGERPRINT_ROWS + 2)[1:-1]
                   .round()})
    return [projections[:, r:r + 1] for r in rows]


def _chunk_sizes(dataset):
    """``(n_chunks, 3)``: each chunk's frame, byte offset and size, of an HDF5 dataset
    stored with filters (compression); None for any other source."""
    try:
        if not dataset.id.get_create_plist().get_nfilters():
            return None
    except AttributeError:  # not an h5py dataset
        return None
    found = []

    def place(info):
        found.append((info.chunk_offset[0], info.byte_offset, info.size))
    if hasattr(dataset.id, "chunk_iter"):  # one pass over the chunk index
        dataset.id.chunk_iter(place)
    else:  # HDF5 before 1.14
        for i in range(dataset.id.get_num_chunks()):
            place(dataset.id.get_chunk_info(i))
    return np.array(sorted(found), np.int64)


class FrameRuns:
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

    def compressed_sizes(self):
        """The input's hash of every projection, where the dataset is compressed
        (:func:`sampled`): its chunks', flats' and darks' too."""
        return _chunk_sizes(self.dataset)

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        head, rest = key[0], key[1:]
        if isinstance(head, (int, np.integer)):
            return self.dataset[(int(self.indices[head]),) + rest]
        if head != slice(None):
            raise IndexError("FrameRuns: index the first axis with ':' or one integer")
        parts = [np.asarray(self.dataset[(slice(a, b),) + rest]) for a, b in self.runs]
        return np.concatenate(parts) if len(parts) > 1 else parts[0]


