"""What every reader gives: a :class:`Scan` of projections, angles, flats and darks,
:class:`FrameRuns` (chosen frames of one dataset, read as runs), and :func:`need` for
the optional packages (h5py, tifffile) that the file formats take."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

READ_THREADS = 8  # files (or runs of frames) read at once
# Detector rows of every projection in the input's hash, beside its first, middle and
# last projections whole: a projection changed anywhere changes the hash (the first,
# middle and last alone missed projection 100, and a resume mixed two inputs).
FINGERPRINT_ROWS = 8
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
        """A hash of the data's shape and type, of :data:`FINGERPRINT_ROWS` detector rows
        of every projection, of its first, middle and last projections whole and of the
        first flat and dark: a resumed run refuses input that changed. (A 2048^3 uint16
        scan: 64 MB read of 16 GB.)"""
        digest = hashlib.sha1(repr((self.shape, str(self.projections.dtype))).encode())
        n, n_rows = self.shape[:2]
        frames = [self.projections[i] for i in sorted({0, n // 2, n - 1})]
        rows = sorted({int(r) for r in np.linspace(0, n_rows - 1, FINGERPRINT_ROWS).round()})
        frames += [self.projections[:, r:r + 1] for r in rows]
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

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        head, rest = key[0], key[1:]
        if isinstance(head, (int, np.integer)):
            return self.dataset[(int(self.indices[head]),) + rest]
        if head != slice(None):
            raise IndexError("FrameRuns: index the first axis with ':' or one integer")
        parts = [np.asarray(self.dataset[(slice(a, b),) + rest]) for a, b in self.runs]
        return np.concatenate(parts) if len(parts) > 1 else parts[0]


