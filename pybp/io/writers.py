"""Slices to files, none lost, none half-written and nothing else replaced: a folder of
TIFF slices (one file per detector row), one HDF5 dataset chunked per slice, or a
``.npy`` stack.

Each output is an array-like ``(n_slices, ny, nx)`` that :func:`pybp.reconstruct`
writes into (``out[a:b] = slices``). A TIFF slice is written under a temporary name,
flushed to the disk and renamed; an HDF5 or ``.npy`` output is built under
``NAME.partial``, its space reserved at the start, with a record of the slices complete
(updated after their data reached the disk) and renamed when every slice is in. So an
interrupted run, a full disk or a power cut leaves only whole slices, and
``resume=True`` finds them and writes the rest.

What the slices are (pybp's version, the input and a fingerprint of its data, the
centre exactly, every option that changes a value) is stored with them (``pybp.json``
in the folder, attributes in HDF5, ``NAME.json`` beside a ``.npy``): that is pybp's
mark. ``resume`` and ``overwrite`` act only on outputs that carry it, and a resumed run
must match it. One process writes an output at a time (:class:`OutputLock`).
"""

from __future__ import annotations

import glob
import json
import math
import os
from pathlib import Path

import numpy as np

from pybp.io.output.base import DTYPES, METADATA, is_pybp, files_of, partial_path, sidecar_path
from pybp.io.output.disk import (STORAGE_ERRORS, WriteError, check_free_space,
                                 check_output_file, writable_folder)
from pybp.io.output.hdf5 import H5_METADATA, Hdf5File, h5_metadata
from pybp.io.output.lock import LOCK, OutputLock, lock_path
from pybp.io.output.npy import NpyFile
from pybp.io.output.tiff import TiffSlices, TiffFolder
from pybp.io.readers import HDF5_SUFFIXES, TiffStack
from pybp.io.scan import need

__all__ = ["DTYPES", "LOCK", "STORAGE_ERRORS", "Hdf5File", "NpyFile", "OutputLock", "TiffFolder",
           "TiffSlices", "WriteError", "check_free_space", "check_not_input",
           "check_output_file", "check_output_path", "open_output", "output_kind",
           "read_slices", "stored_metadata"]


def output_kind(path) -> str:
    text = str(path)
    if not text.strip():
        raise ValueError("output: the name is empty; give a folder for TIFF slices, or a "
                         ".h5 or .npy file name")
    suffix = Path(text).suffix.lower()
    if suffix in HDF5_SUFFIXES:
        return "hdf5"
    if suffix == ".npy":
        return "npy"
    if suffix in (".tif", ".tiff"):
        raise ValueError(f"output: {path} names a TIFF file; slices go into a folder, one "
                         "file per slice: give a folder name")
    return "tiff"


def _input_paths(spec):
    """The files and folders an input argument names (a glob: its folder and files)."""
    text = str(spec)
    if ":/" in text and not os.path.exists(text):
        text = text.split(":/", 1)[0]  # FILE:/ENTRY
    if any(ch in text for ch in "*?["):
        return [Path(text).parent.resolve()] + [Path(p).resolve() for p in glob.glob(text)]
    return [Path(text).resolve()]


def check_not_input(path, kind, inputs):
    """Refuse an output that is an input, lies inside an input folder, or (a folder of
    slices) holds an input."""
    out = Path(path).resolve()
    written = [p.resolve() for p in files_of(Path(path), kind)]
    for spec in inputs:
        if spec is None:
            continue
        for source in _input_paths(spec):
            if source in written and source != out:  # NAME.json beside NAME.npy, say
                raise ValueError(f"output: {path} would write {source.name} beside it, which "
                                 f"is the input {spec}; give another name (pybp never writes "
                                 "over its input)")
            if source in written or (source.is_dir() and source in out.parents):
                raise ValueError(f"output: {path} is the input {spec}, or inside it; give "
                                 "another name (pybp never writes over its input)")
            if kind == "tiff" and out in source.parents:
                raise ValueError(f"output: the folder {path} holds the input {spec}; give "
                                 "another folder")


def check_output_path(path, overwrite=False, resume=False, inputs=()) -> str:
    """Check an output path before any work, touching nothing; return its kind. It must
    not be (or be inside) one of ``inputs``; an existing output needs ``overwrite`` or
    ``resume``, and either acts only on an output pybp made; the folder it goes in (a
    TIFF folder's nearest existing parent) must be writable."""
    kind = output_kind(path)
    path = Path(path)
    if overwrite and resume:
        raise ValueError("resume: --resume and --overwrite exclude each other")
    check_not_input(path, kind, inputs)
    if kind == "tiff":
        if path.exists() and not path.is_dir():
            raise FileExistsError(f"output: {path} is a file; give a folder name")
        existing = path.is_dir() and (any(path.glob("slice_*.tif")) or (path / METADATA).exists())
        # pybp makes the output folder, not the folders it goes in: a missing parent is
        # a mistyped path far more often than a wish.
        writable_folder(path if path.is_dir() else path.parent, create=False)
    else:
        if path.is_dir():
            raise FileExistsError(f"output: {path} is a folder; give a file name")
        existing = any(p.exists() for p in files_of(path, kind))
        writable_folder(path.parent, create=False)
    if existing:
        OutputLock(lock_path(path, kind), path).check_free()
    if existing and not (overwrite or resume):
        found = path if kind == "tiff" else next(p for p in files_of(path, kind) if p.exists())
        raise FileExistsError(f"output: {found} exists; pass --resume to finish it, or "
                              "--overwrite to replace it")
    if existing and not is_pybp(stored_metadata(path)) and not _killed_early(path, kind):
        what = "holds slices" if kind == "tiff" else "exists"
        if kind != "tiff" and not path.exists():
            path = next(p for p in files_of(path, kind) if p.exists())
        raise FileExistsError(f"output: {path} {what} but pybp did not write it (no pybp "
                              "metadata); pybp resumes and replaces only its own outputs: "
                              "choose another name")
    return kind


def _killed_early(path: Path, kind: str) -> bool:
    """Whether the files at ``path`` are the partial files of a pybp run killed before
    it marked them (``NAME.partial`` and its record, nothing else): its lock file is
    still there (a run that ends removes it) and no process holds it (checked before).
    Such an output is pybp's: ``--resume`` and ``--overwrite`` start it again."""
    if kind == "tiff" or not lock_path(path, kind).is_file():
        return False
    ours = [partial_path(path), path.with_name(path.name + ".partial.done")]
    return not [p for p in files_of(path, kind) if p.exists() and p not in ours]


KINDS = dict(tiff=TiffFolder, hdf5=Hdf5File, npy=NpyFile)


def open_output(path, shape, dtype="float32", metadata=None, overwrite=False, resume=False,
                inputs=()):
    """The output for ``shape = (n_slices, ny, nx)`` slices at ``path`` (a folder for
    TIFF slices, ``.h5``/``.hdf5``/``.nxs``, or ``.npy``), everything checked before the
    file system is touched: not one of ``inputs``; an existing output needs
    ``overwrite`` or ``resume`` and must be pybp's; the folder must be writable and hold
    the slices still to write. Locked against other processes until ``close()``."""
    if str(dtype) not in DTYPES:
        raise ValueError(f"dtype: expected one of {', '.join(DTYPES)}, got {dtype!r}")
    kind = check_output_path(path, overwrite, resume, inputs)
    metadata = dict(metadata or {}, first_row=int((metadata or {}).get("first_row", 0)))
    try:
        json.dumps(metadata).encode()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"output: cannot store what the slices are: {exc}") from None
    if kind == "hdf5":
        try:
            str(Path(path).resolve()).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"output: {os.fsencode(path)!r}: HDF5 needs a file name (and "
                             "folder) in UTF-8; choose another name") from None
    n_bytes = math.prod(int(n) for n in shape[1:]) * np.dtype(dtype).itemsize  # no int64 wrap
    if not resume:
        check_free_space(Path(path) if kind == "tiff" else Path(path).parent, shape[0] * n_bytes)
    output = KINDS[kind](path, shape, dtype, metadata)
    try:
        output.open(resume)
        if resume and kind == "tiff":  # what is still to write (files reserve their space)
            check_free_space(output.path, int((~output.done).sum()) * n_bytes)
    except BaseException:
        output.close()
        output.discard()
        raise
    return output


def stored_metadata(path):
    """What pybp stored with an output at ``path`` (finished or partial), or None."""
    path = Path(path)
    try:
        kind = output_kind(path)
    except ValueError:
        return None
    found = {"tiff": path / METADATA, "npy": sidecar_path(path)}.get(kind)
    try:
        if found is not None:
            return json.loads(found.read_text()) if found.exists() else None
        for candidate in (partial_path(path), path):
            if candidate.exists():
                with need("h5py").File(candidate, "r") as f:
                    return h5_metadata(f)
    except (OSError, KeyError, ValueError):
        return None
    return None


def read_slices(path):
    """Slices written by pybp (or any TIFF folder, HDF5 ``/slices`` or ``.npy``), as an
    array-like ``(n_slices, ny, nx)`` and the metadata stored with them."""
    path = Path(path)
    if not path.exists():
        partial = partial_path(path)
        being = f" ({partial.name} is a run's, not finished: --resume it)" if partial.exists() \
            else ""
        raise FileNotFoundError(f"input: {path} does not exist{being}")
    kind = output_kind(path) if not path.is_dir() else "tiff"
    if kind == "tiff":
        metadata = json.loads((path / METADATA).read_text()) if (path / METADATA).exists() else {}
        files = sorted(path.glob("slice_*.tif"))
        if not files:
            raise ValueError(f"input: no slice_*.tif files in {path}")
        return TiffStack(files, "input"), metadata
    if kind == "npy":
        sidecar = sidecar_path(path)
        metadata = json.loads(sidecar.read_text()) if sidecar.exists() else {}
        slices = np.load(path, mmap_mode="r")
    else:
        h5file = need("h5py").File(path, "r")
        if "slices" not in h5file:
            h5file.close()
            raise ValueError(f"input: {path} has no /slices dataset")
        slices = h5file["slices"]
        metadata = json.loads(slices.attrs.get(H5_METADATA, "{}"))
    if len(slices.shape) != 3:
        raise ValueError(f"input: expected slices (n_slices, ny, nx) in {path}, got shape "
                         f"{tuple(slices.shape)}")
    return slices, metadata
