"""A folder of TIFF slices, ``slice_00042.tif`` for detector row 42, each written
whole, several at once; ``pybp.json`` beside them."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from pybp.io.output import disk
from pybp.io.output.base import METADATA, Output, check_same, converted
from pybp.io.output.lock import lock_path
from pybp.io.scan import need

WRITE_THREADS = 8      # TIFF files written at once
POOL_LOCK = threading.Lock()  # guards the making of a TiffSlices' threads


class TiffSlices:
    """Writes slices into ``folder`` as ``slice_00042.tif`` for detector row 42, each
    whole (temporary name, flushed to the disk, renamed), several at once;
    ``slices[a:b] = images`` writes rows ``first_row + a`` on, ``writers`` files at once
    (default :data:`WRITE_THREADS`). Picklable: what Dask workers write with."""

    def __init__(self, folder, first_row, n_slices, dtype, description, writers=None):
        self.folder, self.first_row, self.dtype = Path(folder), first_row, np.dtype(dtype)
        self.writers = writers or WRITE_THREADS
        self.digits = max(5, len(str(first_row + n_slices - 1)))
        self.description = description
        self._pool = None
        self._state, self._running, self._settled = threading.Condition(), 0, False

    def name(self, index) -> str:
        return f"slice_{self.first_row + index:0{self.digits}d}.tif"

    def write(self, index, image):
        tifffile = need("tifffile")
        image = converted(image[None], self.dtype, self.first_row + index)[0]
        path = self.folder / self.name(index)
        with disk.writing(path):
            disk.atomic_write(path, lambda file: tifffile.imwrite(
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
        with POOL_LOCK:  # pieces come from several threads (pybp.stream.executor.WRITES)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.writers, thread_name_prefix="pybp-tiff")
        futures = [self._pool.submit(self._counted, start + i, s) for i, s in enumerate(slices)]
        for future in futures:  # every write ends (whole or removed) before an error is raised
            future.exception()
        disk.sync_folder(self.folder)  # the renames of those written
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
        with POOL_LOCK:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        with self._state:
            self._state.wait_for(lambda: self._running == 0)

    def close(self):
        self.settle()


class TiffFolder(Output):
    """``FOLDER/slice_00042.tif`` for detector row 42, float32 (or float16)."""

    kind = "tiff"

    slices = None

    def open(self, resume=False):
        need("tifffile")
        folder = self.path
        missing = [p for p in [folder, *folder.parents] if not p.exists()]
        disk.writable_folder(folder, create=True)
        self.made += missing[::-1]
        self._lock(lock_path(folder, "tiff"))
        self._remove_partial()
        description = json.dumps({k: self.metadata[k] for k in ("center", "filter", "input")
                                  if k in self.metadata})
        self.slices = TiffSlices(folder, self.first_row, self.shape[0], self.dtype, description,
                                 self.writers)
        stored = folder / METADATA
        if resume and stored.exists():
            check_same(json.loads(stored.read_text()), self.metadata, folder)
            self.scan_done()
        elif stored.exists() or any(folder.glob("slice_*.tif")):  # --overwrite: pybp's own
            for old in folder.glob("slice_*.tif"):  # before the metadata that names them goes
                old.unlink()
            disk.sync_folder(folder)
        if not stored.exists():
            self.made.append(stored)
        disk.write_json(stored, self.metadata)

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
