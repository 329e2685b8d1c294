"""Writing a slice for a person to look at: 8-bit PNG with no dependency, or raw values
as ``.npy`` / ``.tif`` (tifffile). Existing files are never replaced unless asked."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np


def _png_bytes(image8: np.ndarray) -> bytes:
    height, width = image8.shape
    raw = b"".join(b"\x00" + image8[row].tobytes() for row in range(height))

    def chunk(kind, payload):
        body = kind + payload
        return struct.pack(">I", len(payload)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def write_slice(path, image, low=None, high=None, overwrite=False) -> Path:
    """Write a 2-D slice; PNG is scaled from ``low..high`` (default: its range)."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"output: {path} exists; choose another name or pass --overwrite")
    image = np.asarray(image, np.float32)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        np.save(path, image)
    elif suffix in (".tif", ".tiff"):
        try:
            import tifffile
        except ImportError as exc:
            raise RuntimeError("output: writing TIFF needs tifffile (pip install pybp[io])") from exc
        tifffile.imwrite(path, image)
    elif suffix == ".png":
        low = float(image.min()) if low is None else low
        high = float(image.max()) if high is None else high
        scaled = np.clip((image - low) / max(high - low, 1e-30), 0, 1)
        path.write_bytes(_png_bytes(np.round(scaled * 255).astype(np.uint8)))
    else:
        raise ValueError(f"output: expected a .png, .npy or .tif file name, got {path.name!r}")
    return path
