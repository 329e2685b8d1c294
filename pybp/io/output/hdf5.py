"""One HDF5 dataset ``/slices`` chunked per slice, built as ``NAME.partial`` with a
record of the slices complete. Every chunk is placed in the file when the dataset is
made, so each slice is written straight to its chunk's bytes, from several threads at
once, beside libhdf5 rather than through it (one call at a time); libhdf5 writes only
the record and the file's own structure."""

from __future__ import annotations

import json
import os
import threading
import warnings

import numpy as np

from pybp.io.hdf5 import byte_offsets
from pybp.io.output import disk
from pybp.io.output.base import Output, check_same, converted, partial_path
from pybp.io.output.lock import lock_path
from pybp.io.scan import need

H5_METADATA = "pybp_metadata"  # JSON; scalar entries are attributes of their own too


def make_slices(h5file, name, shape, dtype):
    """Dataset ``name`` of ``shape`` in ``h5file``, chunked per slice, every chunk placed
    in the file now (its blocks reserved with the file's: ``disk.reserve``; its bytes
    known: :func:`slice_offsets`) and not filled."""
    h5py = need("h5py")
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    return h5file.create_dataset(name, shape, dtype, dcpl=dcpl, chunks=(1,) + tuple(shape[1:]))


def write_planes(fd, offsets, start, planes):
    """``planes`` into slices ``start`` on of a dataset, each at its chunk's bytes
    (``offsets``: :func:`slice_offsets`) through ``fd``, not libhdf5."""
    for i, plane in enumerate(planes):
        disk.write_all(fd, plane, int(offsets[start + i]))


def slice_offsets(data):
    """The byte offset in the file of each slice of the dataset ``data`` (made by
    :func:`make_slices`: a chunk a slice, every chunk placed, no filters, this machine's
    byte order), or None where a slice's bytes cannot be written there as they are
    (:func:`pybp.io.hdf5.byte_offsets`): such a dataset is written through h5py."""
    found = byte_offsets(data)
    if found is None or found[1] != data.shape[1]:
        return None
    return found[0][:, 0]


class Hdf5File(Output):
    """Dataset ``/slices`` chunked per slice, the metadata as its attributes; built as
    ``NAME.partial`` with ``/pybp_done`` (one byte per slice), which goes when every
    slice is in (a partial file without it is complete: killed before its rename).
    Slices go straight to their chunks' bytes (:func:`slice_offsets`) through a file
    descriptor of the output's own, which several threads write at once."""

    kind = "hdf5"
    file = record = fd = offsets = None

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
        if self.record is not None:  # slices still to write
            self.offsets = slice_offsets(self.data)
            if self.offsets is not None:
                self.fd = os.open(self.partial, os.O_RDWR)

    def _create(self):
        self.made.append(self.partial)
        self.file = self.h5py.File(self.partial, "w")
        data = make_slices(self.file, "slices", self.shape, self.dtype)
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
            if self.fd is not None:  # each slice at its chunk's place, beside libhdf5
                write_planes(self.fd, self.offsets, start, data)
                os.fsync(self.fd)  # the data on the disk before the record says it is there
            else:
                with Hdf5File._writing:
                    self.data[start:start + len(data)] = data
                self._sync()
            with Hdf5File._writing:
                self.record[start:start + len(data)] = 1
            self._sync()
        self.done[start:start + len(data)] = True

    def finish(self):
        if self.file is not None and self.done.all():
            self._close_fd()
            if self.record is not None:
                del self.file["pybp_done"]
                self.record = None
            self._sync()
            self.file.close()
            self.file = None
            os.replace(self.partial, self.path)
            disk.sync_folder(self.path.parent)

    def _close_fd(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def close(self):
        self._close_fd()
        if self.file is not None:
            self.file.close()
            self.file = None
        super().close()


def h5_metadata(h5file):
    return json.loads(h5file["slices"].attrs[H5_METADATA])
