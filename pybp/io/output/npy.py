"""A ``.npy`` stack, built as ``NAME.partial`` through the file, with a record of the
slices complete beside it and the metadata in ``NAME.json``."""

from __future__ import annotations

import io
import json
import os

import numpy as np

from pybp.io.output import disk
from pybp.io.output.base import Output, check_same, converted, partial_path, sidecar_path
from pybp.io.output.lock import lock_path


def header(shape, dtype) -> bytes:
    """The ``.npy`` header (format 1.0) of a C-ordered array of ``shape`` and ``dtype``."""
    text = io.BytesIO()
    np.lib.format.write_array_header_1_0(text, dict(
        descr=np.lib.format.dtype_to_descr(np.dtype(dtype)), fortran_order=False,
        shape=tuple(shape)))
    return text.getvalue()


class NpyFile(Output):
    """A ``.npy`` stack built as ``NAME.partial`` (written through the file, not a
    memory map, so that a full disk is an error rather than SIGBUS); which slices are
    in is kept in ``NAME.partial.done`` (one byte per slice); the metadata in
    ``NAME.json``."""

    kind = "npy"
    fd = record_fd = None

    def open(self, resume=False):
        self.partial = partial_path(self.path)
        self.record_path = self.path.with_name(self.path.name + ".partial.done")
        self.sidecar = sidecar_path(self.path)
        self._lock(lock_path(self.path, "file"))
        if resume and self.sidecar.exists() and (self.path.exists() or self.partial.exists()):
            check_same(json.loads(self.sidecar.read_text()), self.metadata, self.path)
            if self.path.exists() and not self.partial.exists():
                self.record_path.unlink(missing_ok=True)  # killed before removing it
                self.done[:] = True
                return
            if self.record_path.exists():
                self.fd = os.open(self.partial, os.O_RDWR)
                self.offset = self._header_offset()
                self.record_fd = os.open(self.record_path, os.O_RDWR)
                record = np.frombuffer(os.pread(self.record_fd, self.shape[0], 0), np.uint8)
                self.done[:len(record)] = record.astype(bool)
        if self.fd is None:
            self._create()

    def _create(self):
        for old in (self.path, self.partial, self.record_path):  # --overwrite: pybp's own
            old.unlink(missing_ok=True)
        if not self.sidecar.exists():
            self.made.append(self.sidecar)
        disk.write_json(self.sidecar, self.metadata)  # first: it describes whatever follows
        self.made += [self.partial, self.record_path]
        head = header(self.shape, self.dtype)
        self.fd = os.open(self.partial, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.offset = len(head)
        disk.reserve(self.fd, self.offset + self.shape[0] * self.slice_bytes)
        disk.write_all(self.fd, head, 0)
        self.record_fd = os.open(self.record_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        disk.write_all(self.record_fd, bytes(self.shape[0]), 0)
        os.fsync(self.fd)
        os.fsync(self.record_fd)
        disk.sync_folder(self.path.parent)

    def _header_offset(self):
        with open(self.partial, "rb") as f:
            version = np.lib.format.read_magic(f)
            shape, fortran, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                                     else np.lib.format.read_array_header_2_0(f))
            if tuple(shape) != self.shape or dtype != self.dtype or fortran:
                raise ValueError(f"resume: {self.partial} holds {shape} {dtype}, this run "
                                 f"writes {self.shape} {self.dtype}; --overwrite starts again")
            return f.tell()

    def __setitem__(self, key, slices):
        start = 0 if key.start is None else key.start
        data = converted(slices, self.dtype, self.first_row + start)
        with disk.writing(self.partial):
            disk.write_all(self.fd, data, self.offset + start * self.slice_bytes)
            os.fsync(self.fd)  # the data on the disk before the record that says it is there
            disk.write_all(self.record_fd, b"\1" * len(data), start)
            os.fsync(self.record_fd)
        self.done[start:start + len(data)] = True

    def finish(self):
        if self.fd is not None and self.done.all():
            self._close_files()
            os.replace(self.partial, self.path)
            disk.sync_folder(self.path.parent)
            self.record_path.unlink(missing_ok=True)

    def _close_files(self):
        for name in ("fd", "record_fd"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)

    def close(self):
        self._close_files()
        super().close()
