"""One process writes an output at a time: a lock file beside it (inside a folder of
TIFF slices), held with ``flock``."""

from __future__ import annotations

import os
import socket
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: the lock file's existence is the lock
    fcntl = None

LOCK = ".pybp-lock"


def lock_path(path: Path, kind: str) -> Path:
    """Where the lock of an output of ``kind`` at ``path`` lies."""
    return path / LOCK if kind == "tiff" else path.with_name(f".{path.name}{LOCK}")


class OutputLock:
    """One process writes an output at a time: a lock file held with ``flock`` (the
    kernel releases it when its process dies, so a killed run never leaves it held),
    taken before the output is touched. A second process stops at once with
    ``FileExistsError``, having changed nothing."""

    def __init__(self, path: Path, output: Path):
        self.path, self.output, self.fd = path, output, None

    def acquire(self):
        while True:
            flags = os.O_RDWR | os.O_CREAT | (0 if fcntl else os.O_EXCL)
            try:
                fd = os.open(self.path, flags, 0o644)
            except FileExistsError:
                self._busy("")
            try:
                if fcntl:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
                os.close(fd)
                self._busy(holder)
            try:  # its holder may have released and removed it meanwhile
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"process {os.getpid()} on {socket.gethostname()}".encode())
        self.fd = fd

    def check_free(self):
        """Raise as :meth:`acquire` would if another process holds the lock; take
        nothing (what :func:`check_output_path` asks before reading the output)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            if fcntl is None:
                self._busy("")
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                self._busy(os.pread(fd, 200, 0).decode(errors="replace").strip())
        finally:
            os.close(fd)

    def _busy(self, holder):
        raise FileExistsError(f"output: {self.output} is being written by another pybp "
                              f"{'(' + holder + ') ' if holder else ''}run; wait for it to "
                              "end, or choose another name")

    def release(self):
        if self.fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self.fd)
            self.fd = None
