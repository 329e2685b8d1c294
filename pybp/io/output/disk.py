"""Files written whole or not at all, on a disk that may fill up: atomic writes
(temporary name, flushed, renamed), space reserved up front, durable renames, and write
errors that say the disk is full."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import threading
from pathlib import Path

FREE_SPACE_MARGIN = 1.02  # headers, and room for the file system
# Write errors that end a run with "N of M slices are complete; --resume".
STORAGE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG)
SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")


class WriteError(OSError):
    """Writing slices failed (the disk is full, the quota reached, the disk failing)."""


class writing:
    """Turn an ``OSError`` while writing ``path`` into a :class:`WriteError`. A short
    write that carries no error number (NumPy's ``tofile``, which tifffile writes
    slices with, says "4096 requested and 952 written") is the disk or a quota that
    is full: ``ENOSPC``."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, traceback):
        if kind is not None and issubclass(kind, OSError) and not isinstance(exc, WriteError):
            number, reason = exc.errno, exc.strerror or str(exc)
            if number is None and SHORT_WRITE.search(str(exc)):
                number, reason = errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({exc})"
            raise WriteError(number, f"{self.path}: {reason}") from exc


def check_output_file(path, overwrite=False, suffixes=None, option="--output") -> Path:
    """Check a one-file output (a picture, a kernel's source) before any work: a known
    suffix, not a folder, no existing file without ``overwrite``, a writable folder."""
    if not str(path).strip():
        raise ValueError(f"{option}: the name is empty")
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{option}: {path} is a folder; give a file name")
    if suffixes and path.suffix.lower() not in suffixes:
        raise ValueError(f"{option}: expected a {', '.join(suffixes)} file name, got {path.name!r}")
    if path.exists() and not overwrite:
        raise FileExistsError(f"{option}: {path} exists; choose another name or pass --overwrite")
    writable_folder(path.parent, create=False, option=option)
    return path


def human(n_bytes):
    if n_bytes >= 1e15:
        return f"{n_bytes / 1e12:.3g} TB"
    return f"{n_bytes / 1e9:.2f} GB" if n_bytes >= 1e8 else f"{n_bytes / 1e6:.1f} MB"


def writable_folder(folder: Path, create: bool, option="output"):
    if create:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PermissionError(f"{option}: cannot create folder {folder}: "
                                  f"{exc.strerror or exc}") from None
    if not folder.exists():
        raise FileNotFoundError(f"{option}: folder {folder} does not exist")
    if not folder.is_dir():
        raise NotADirectoryError(f"{option}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"{option}: folder {folder} is not writable")


def check_free_space(folder: Path, n_bytes: int):
    while not folder.exists():
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if n_bytes * FREE_SPACE_MARGIN > free:
        raise OSError(errno.ENOSPC, f"output: the slices need {human(n_bytes)}; {folder} has "
                                    f"{human(free)} free")


def sync_folder(folder: Path):
    """Make renames in ``folder`` durable (a power cut keeps them)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # folders that cannot be synced (some network file systems)
    finally:
        os.close(fd)


def write_all(fd, data, offset=None):
    """Every byte of ``data`` to ``fd`` (at ``offset``): a short write is retried, so a
    full disk shows as ``ENOSPC`` rather than a count of bytes."""
    view = memoryview(data).cast("B")
    while len(view):
        n = os.write(fd, view) if offset is None else os.pwrite(fd, view, offset)
        view = view[n:]
        if offset is not None:
            offset += n


def reserve(fd, n_bytes):
    """The file's blocks allocated now, so that a full disk shows at the start and never
    in the middle of a run (where libhdf5 and memory maps cannot report it)."""
    try:
        os.posix_fallocate(fd, 0, n_bytes)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return  # a file system that allocates on write
        raise OSError(exc.errno, f"output: cannot reserve {human(n_bytes)} "
                                 f"({exc.strerror})") from None


def atomic_write(path: Path, data):
    """``data`` to ``path`` whole: bytes, or a function that writes into the binary file
    it is given (so a slice goes from its array to the file without a copy in memory:
    through a ``BytesIO`` first, TIFF slices were written at a third of the speed).
    Written under a temporary name, flushed to the disk, renamed; readers see a whole
    file or none. The temporary name is the writer's own (process and thread), so two
    writers of one slice (a Dask task run again while the first still runs) never share
    one. The caller syncs the folder."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.partial")
    try:
        with open(temporary, "wb", buffering=0) as file:
            if callable(data):
                data(file)
            else:
                write_all(file.fileno(), data)
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_json(path: Path, value):
    atomic_write(path, json.dumps(value, indent=1, sort_keys=True).encode())
    sync_folder(path.parent)
