"""An iterative run's state kept on disk between iterations (``checkpoint=`` of
:func:`pybp.sirt` and the others; cone beam's command keeps one beside its output): an
interrupted run given the same checkpoint continues from the last state kept, and ends
with the bits an uninterrupted run gives, since the state is every value the method
carries from one iteration to the next (pybp/iterative/methods.py, ``state``). A state
kept by another run (other data, geometry, options or device) is refused, never used or
overwritten; a finished run removes its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np

CHECKPOINT_SECONDS = 30.0  # the least time between two states kept
WRITE_SHARE = 0.1  # and at most this share of the run's time spent keeping them
SUFFIX = ".npz"


def digest(*values) -> str:
    """A SHA-1 of ``values``: arrays by their dtype, shape and bytes, others by repr."""
    h = hashlib.sha1()
    for value in values:
        if isinstance(value, np.ndarray):
            h.update(f"{value.dtype.str}{value.shape}".encode())
            h.update(np.ascontiguousarray(value).data)
        else:
            h.update(repr(value).encode())
        h.update(b"\0")
    return h.hexdigest()


class Checkpoint:
    """The file ``path`` (``.npz``) of the run described by ``key`` (a dict of what
    decides its values, JSON): :meth:`load` before the method, :meth:`keep` after each
    iteration (a state is written whole at most every :data:`CHECKPOINT_SECONDS`, and
    no more often than keeps its writing under :data:`WRITE_SHARE` of the time),
    :meth:`remove` once the run is done."""

    def __init__(self, path, key: dict):
        self.path = Path(path)
        if self.path.suffix != SUFFIX:
            raise ValueError(f"checkpoint: expected a {SUFFIX} file, got {str(path)!r}")
        if not self.path.parent.is_dir():
            raise ValueError(f"checkpoint: {self.path.parent} is not a folder")
        _check_writable(self.path)
        self.key = json.loads(json.dumps(key))  # as it comes back from the file
        self.kept = None  # the iteration of the last state kept
        self._since = time.perf_counter()
        self._writing = 0.0

    def load(self, iterations: int):
        """``(iteration, state)`` kept by this run (the state after ``iteration``, 0
        based), or None where there is no file; an error naming what differs where the
        file is another run's, or a later iteration than ``iterations`` reach."""
        if not self.path.exists():
            return None
        try:
            with np.load(self.path, allow_pickle=False) as kept:
                key = json.loads(str(kept["key"]))
                iteration = int(kept["iteration"])
                state = {name: kept[name] for name in kept.files
                         if name not in ("key", "iteration")}
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"checkpoint: {self.path} is not a state pybp kept ({exc}); "
                             "remove it, or give another path") from None
        if key != self.key:
            differs = next((name for name in sorted(set(key) | set(self.key))
                            if key.get(name) != self.key.get(name)), "?")
            raise ValueError(f"checkpoint: {self.path} holds the state of another run (its "
                             f"{differs} differs); remove it, or give another path")
        if iteration >= iterations:
            raise ValueError(f"checkpoint: {self.path} holds the state after iteration "
                             f"{iteration + 1}; this run takes {iterations}")
        self.kept = iteration
        return iteration, state

    def keep(self, iteration: int, state):
        """Write the state ``state()`` (a dict of arrays) after ``iteration`` where the
        time since the last one allows; whole: a temporary file renamed over the last."""
        now = time.perf_counter()
        if now - self._since < max(CHECKPOINT_SECONDS, self._writing / WRITE_SHARE):
            return
        values = state()
        partial = self.path.with_name(f".{self.path.name}.partial")
        with open(partial, "wb") as f:
            np.savez(f, key=np.array(json.dumps(self.key)), iteration=np.array(iteration),
                     **values)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, self.path)
        self.kept = iteration
        self._since = time.perf_counter()
        self._writing = self._since - now

    def remove(self):
        """The state gone, once the run is done; one that cannot be removed is said,
        not raised: the run's result is what matters then."""
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            warnings.warn(f"pybp: checkpoint: {self.path} could not be removed "
                          f"({exc.strerror}); the run is done, remove it by hand",
                          RuntimeWarning, stacklevel=3)


def _check_writable(path: Path):
    """A file can be made beside ``path`` (the state is written there, then renamed),
    or an error before the first iteration: a read-only folder used to fail at the first
    save, 30 s into the run, or at the end, its result lost."""
    probe = path.with_name(f".{path.name}.probe-{os.getpid()}")
    try:
        with open(probe, "xb"):
            pass
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"checkpoint: cannot write in {path.parent} ({exc.strerror}); give "
                         "a path in a folder you can write") from None
