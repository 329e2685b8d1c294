"""``pybp preview``, and ``--preview`` of ``pybp reconstruct``: a PNG a person looks at
of what a reconstruction wrote (a folder of TIFF slices, ``.h5`` or ``.npy``).

A parallel-beam reconstruction shows one slice (the middle one, or ``--row``), rows
down the picture as the slice's rows go (scikit-image's convention). A cone-beam volume
shows three sections through its centre side by side: the z plane (x to the right, y
up), the y plane and the x plane (z up in both), so that an object looks as it does in
a parallel-beam slice of it (the phantoms of both demos look alike)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pybp.io.images import display_range, label, to_8bit, write_png
from pybp.io.writers import read_slices

SECTION_PLANES = 512  # z planes sampled, at most, for the y and x sections of a volume
GAP = 4  # black pixels between the sections


def default_name(path) -> Path:
    """``INPUT-preview.png`` beside the reconstruction (``rec.h5`` gives
    ``rec.h5-preview.png``: ``rec.npy`` beside it would give another)."""
    path = Path(path)
    return path.with_name(path.name.rstrip("/") + "-preview.png")


def _slice(slices, metadata, path, row):
    first = int(metadata.get("first_row", 0))
    index = len(slices) // 2 if row is None else row - first
    if not 0 <= index < len(slices):
        raise ValueError(f"row: {path} holds rows {first}..{first + len(slices) - 1}, "
                         f"not {row}")
    image = np.asarray(slices[index], np.float32)
    low, high = display_range([image])
    return label(to_8bit(image, low, high), f"r={first + index}")


def sections(volume, centre=None) -> np.ndarray:
    """An 8-bit picture of three sections through ``centre`` ``(k, j, i)`` (default:
    the middle) of ``volume`` ``(nz, ny, nx)`` (any array-like indexed by plane):
    the z plane, the y plane and the x plane, grey levels from the z plane's; y and z
    up. Reads every sampled plane once (at most :data:`SECTION_PLANES`)."""
    nz, ny, nx = volume.shape
    k, j, i = centre or (nz // 2, ny // 2, nx // 2)
    plane = np.asarray(volume[k], np.float32)
    sampled = np.unique(np.linspace(0, nz - 1, min(nz, SECTION_PLANES)).round().astype(int))
    y_section, x_section = np.empty((len(sampled), nx), np.float32), \
        np.empty((len(sampled), ny), np.float32)
    for n, z in enumerate(sampled):
        values = plane if z == k else np.asarray(volume[z], np.float32)
        y_section[n], x_section[n] = values[j], values[:, i]
    low, high = display_range([plane])
    pictures = [label(to_8bit(plane[::-1], low, high), f"z={k}"),
                label(to_8bit(y_section[::-1], low, high), f"y={j}"),
                label(to_8bit(x_section[::-1], low, high), f"x={i}")]
    height = max(p.shape[0] for p in pictures)
    sheet = np.zeros((height, sum(p.shape[1] for p in pictures) + GAP * 2), np.uint8)
    at = 0
    for picture in pictures:
        sheet[:picture.shape[0], at:at + picture.shape[1]] = picture
        at += picture.shape[1] + GAP
    return sheet


def write_preview(path, png=None, overwrite=False, row=None) -> Path:
    """A PNG of a reconstruction at ``path``: the middle slice (or detector row
    ``row``) of parallel-beam slices, three sections of a cone-beam volume."""
    slices, metadata = read_slices(path)
    png = Path(png) if png else default_name(path)
    if "geometry" in metadata:  # a whole volume: cone beam, laminography (pybp/cli/cone.py)
        if row is not None:
            raise ValueError(f"row: {path} is a volume of --geometry, not slices by detector "
                             "row; its preview shows three sections through the middle")
        return write_png(png, sections(slices), overwrite)
    return write_png(png, _slice(slices, metadata, path, row), overwrite)


def cmd_preview(args):
    print(f"wrote {write_preview(args.input, args.output, args.overwrite, args.row)}")
    return 0


def add_parser(sub, common):
    pre = sub.add_parser("preview", parents=[common],
                         help="a PNG of a reconstruction: a slice, or three sections of a volume",
                         description="Write a PNG of what pybp reconstruct wrote (folder, .h5 or "
                                     ".npy): the middle slice (or --row) of parallel-beam "
                                     "slices; three sections through the middle of a cone-beam "
                                     "volume (the z plane with y up, the y and x planes with z "
                                     "up). Grey levels from the 0.5 and 99.5 percentiles of "
                                     "the slice's (z plane's) central square.")
    pre.add_argument("input", help="the reconstruction: folder of TIFF slices, .h5 or .npy")
    pre.add_argument("-o", "--output", help="PNG file (default: INPUT-preview.png)")
    pre.add_argument("--row", type=int, help="parallel beam: detector row of the slice "
                                             "(default: the middle)")
    pre.add_argument("--overwrite", action="store_true", help="replace an existing PNG")
    pre.set_defaults(func=cmd_preview)
