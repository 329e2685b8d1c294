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


SLICE_SUFFIXES = (".png", ".npy", ".tif", ".tiff")


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
            raise RuntimeError("output: writing TIFF needs tifffile (pybp's io extra: "
                               "pip install tifffile)") from exc
        tifffile.imwrite(path, image)
    elif suffix == ".png":
        low = float(image.min()) if low is None else low
        high = float(image.max()) if high is None else high
        path.write_bytes(_png_bytes(to_8bit(image, low, high)))
    else:
        raise ValueError(f"output: expected a .png, .npy or .tif file name, got {path.name!r}")
    return path


# A 3x5 pixel font for the labels a person reads on a picture (centres, rows).
GLYPHS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111",
    "3": "111001111001111", "4": "101101111001001", "5": "111100111001111",
    "6": "111100111101111", "7": "111001001010010", "8": "111101111101111",
    "9": "111101111001111", ".": "000000000000010", "-": "000000111000000",
    " ": "000000000000000", "=": "000111000111000", "c": "000111100100111",
    "r": "000110101100100", "x": "101101010101101", "y": "101101010010010",
    "z": "111001010100111",
}


def label(image8: np.ndarray, text: str, scale=None) -> np.ndarray:
    """Write ``text`` in white on a black box at the top left corner of an 8-bit image."""
    scale = scale or max(1, image8.shape[1] // 100)
    width = (4 * len(text) + 1) * scale
    height = 7 * scale
    image8[:min(height, image8.shape[0]), :min(width, image8.shape[1])] = 0
    for k, ch in enumerate(text):
        glyph = np.array([int(b) for b in GLYPHS[ch]], np.uint8).reshape(5, 3) * 255
        block = np.kron(glyph, np.ones((scale, scale), np.uint8))
        y, x = scale, (1 + 4 * k) * scale
        target = image8[y:y + block.shape[0], x:x + block.shape[1]]
        target[...] = block[:target.shape[0], :target.shape[1]]
    return image8


def to_8bit(image, low, high) -> np.ndarray:
    scaled = np.clip((np.asarray(image, np.float64) - low) / max(high - low, 1e-30), 0, 1)
    return np.round(scaled * 255).astype(np.uint8)


def display_range(images, percentiles=(0.5, 99.5)):
    """Grey levels that show a reconstruction: the 0.5 and 99.5 percentiles of the
    central square of the first image (the circle outside holds edge artefacts)."""
    first = np.asarray(images[0], np.float32)
    h, w = first.shape
    centre = first[h // 4:h - h // 4, w // 4:w - w // 4]
    low, high = np.percentile(centre, percentiles)
    return float(low), float(high if high > low else low + 1)


def write_png(path, image8, overwrite=False) -> Path:
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"output: {path} exists; choose another name or pass --overwrite")
    path.write_bytes(_png_bytes(image8))
    return path


def contact_sheet(images8, columns=None, gap=4) -> np.ndarray:
    """Equal-sized 8-bit images in a grid, ``gap`` black pixels apart."""
    count = len(images8)
    columns = columns or int(np.ceil(np.sqrt(count)))
    rows = int(np.ceil(count / columns))
    h, w = images8[0].shape
    sheet = np.zeros((rows * (h + gap) - gap, columns * (w + gap) - gap), np.uint8)
    for k, image in enumerate(images8):
        r, c = divmod(k, columns)
        sheet[r * (h + gap):r * (h + gap) + h, c * (w + gap):c * (w + gap) + w] = image
    return sheet
