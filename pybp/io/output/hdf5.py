"""One HDF5 dataset ``/slices`` chunked per slice, built as ``NAME.partial`` with a
record of the slices complete."""

from __future__ import annotations

import json
import os
import threading
import warnings

import numpy as np

from pybp.io.output import disk
from pybp.io.output.base import Output, check_same, converted, partial_path
from pybp.io.output.lock import lock_path
from pybp.io.scan import need

H5_METADATA = "pybp_metadata"  # JSON; scalar entries are attributes of their own too


class Hdf5File(Output):
    """Dataset ``/slices`` chunked per slice, the metadata as its attributes; built as
    ``NAME.partial`` with ``/pybp_done`` (one byte per slice), which goes when every
    slice is in (a partial file without it is complete: killed before its rename)."""

    kind = "hdf5"
    file = record = None

    def open(self, resume=False):
        self.h5py = need("h5py")
        self.partial = partial_path(self.path)
        self._lock(lock_path(self.path, "file"))
        if resume and self.path.exists() and not self.partial.exists():
            with self.h5py.File(self.path, "r") as f:
                check_same(h5_metadata(f), self.metadata, self.path)
            self.done[:] = True  # finished before
            return
        if resume and self.partial.exists():
            try:
                self.file = self.h5py.File(self.partial, "r+")
                stored = h5_metadata(self.file)
            except (OSError, KeyError, ValueError) as exc:  # killed while flushing: start again
                if self.file is not None:
                    self.file.close()
                self.file = None

                warnings.warn(f"output: {self.partial} from the interrupted run cannot be "
                              f"read ({exc}); starting it again", RuntimeWarning, stacklevel=3)
            else:
                check_same(stored, self.metadata, self.partial)
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
        dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY)  # every chunk placed now: see reserve
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
        disk.reserve(fd, os.fstat(fd).st_size)
        os.fsync(fd)

    def _sync(self):
        """The file's buffers handed to the system (one HDF5 call at a time), then
        flushed to the disk outside the lock: another writer's piece goes into the
        file meanwhile, so the disk and the copies into the file overlap."""
        with Hdf5File._writing:
            self.file.flush()
            fd = self.file.id.get_vfd_handle()
        os.fsync(fd)

    # One HDF5 call at a time (from the writing threads): h5py serialises its calls
    # anyway. Each piece's record is written only once its data are on the disk, so a
    # failed sync leaves every slice recorded on the disk.
    _writing = threading.Lock()

    def __setitem__(self, key, slices):
        start = 0 if key.start is None else key.start
        data = converted(slices, self.dtype, self.first_row + start)
        with disk.writing(self.partial):
            with Hdf5File._writing:
                self.data[start:start + len(data)] = data
            self._sync()  # the data on the disk before the record that says it is there
            with Hdf5File._writing:
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
            disk.sync_folder(self.path.parent)

    def close(self):
        if self.file is not None:
            self.file.close()
            self.file = None
        super().close()


def h5_metadata(h5file):
    return json.loads(h5file["slices"].attrs[H5_METADATA])
