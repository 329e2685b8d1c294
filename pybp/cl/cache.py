"""Where pybp keeps files for the user (``PYBP_CACHE_DIR``, else the user's cache
directory), and writing a file whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import platformdirs  # a pyopencl dependency


def cache_dir() -> Path:
    if os.environ.get("PYBP_CACHE_DIR"):
        return Path(os.environ["PYBP_CACHE_DIR"])
    return Path(platformdirs.user_cache_dir("pybp"))


def write_text_new(path, text: str, overwrite: bool = False) -> Path:
    """Write ``text`` to ``path`` atomically, refusing to replace a file unless asked."""
    return _write_new(path, text, "w", overwrite)


def write_bytes_new(path, data: bytes, overwrite: bool = True) -> Path:
    """Write ``data`` to ``path`` atomically (replacing a file unless told not to)."""
    return _write_new(path, data, "wb", overwrite)


def _write_new(path, data, mode, overwrite) -> Path:
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite to replace it")
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path
