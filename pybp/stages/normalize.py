"""Normalisation: detector projections of a chunk of rows to float32 sinograms on the
device: ``(p - dark) / (flat - dark)``, ``-log``, and the transpose from projections
``(angle, row, bin)`` to sinograms ``(row, angle, bin)``; or, before phase retrieval
(pybp/stages/phase.py), to the normalised intensity in the projections' layout
(templates/stages/normalize.cl.mako). The flat-field rule itself is the one every path
shares (templates/stages/flat_field.cl.mako; cone beam's pre-weighting calls it too)."""

from __future__ import annotations

import warnings

import numpy as np
import pyopencl as cl

from pybp.cl import codegen
from pybp.cl.kernel import Arg, ints
from pybp.stages.base import Need, Stage, Zeros

# OpenCL types of the inputs the device converts itself; others become float32 on the host.
RAW_TYPES = {np.dtype(np.uint8): "uchar", np.dtype(np.int8): "char",
             np.dtype(np.uint16): "ushort", np.dtype(np.int16): "short",
             np.dtype(np.uint32): "uint", np.dtype(np.int32): "int",
             np.dtype(np.float32): "float"}
FLOOR_TRANSMISSION = 1e-6  # what a non-positive normalised value becomes before -log
BIN_ITEMS = 64  # work-items along the bins of a projection row


def line_integrals_numpy(transmission) -> np.ndarray:
    """The flat-field rule's ``-log`` in float64 on the host, as the device does it
    (templates/stages/flat_field.cl.mako): a transmission that is not positive becomes
    :data:`FLOOR_TRANSMISSION`, one that is not finite 1 (transparent)."""
    t = np.asarray(transmission, np.float64)
    finite = np.isfinite(t)
    return -np.log(np.where(finite & (t > 0), t, np.where(finite, FLOOR_TRANSMISSION, 1.0)))


def warn_replaced(count: int, n_values: int, stacklevel=2):
    """The one warning of every path for values the flat-field rule replaced."""
    if count:
        warnings.warn(f"projections: {count} of {n_values} normalised values had no "
                      "transmission to take the log of (not positive, or flat equal to "
                      "dark); they were set to 1e-6 (not positive: FLOOR_TRANSMISSION) or "
                      "1 (not a number)", RuntimeWarning, stacklevel=stacklevel + 1)


def raw_dtype(dtype) -> np.dtype:
    """The dtype projections of ``dtype`` travel to the device in."""
    dtype = np.dtype(dtype)
    return dtype if dtype in RAW_TYPES else np.dtype(np.float32)


def arguments(raw_type: str, real: str, intensity: bool = False) -> tuple:
    return (
        Arg("projections", f"__global const {raw_type} *", "n_angles x n_rows x n_bins: this chunk"),
        Arg("dark", f"__global const {real} *", "means per detector row and bin:"),
        Arg("flat", f"__global const {real} *", "this chunk's n_rows x n_bins"),
        *ints("n_angles", "n_rows", "n_bins"),
        Arg("flat_field", "const int", "0: the data are already normalised"),
        Arg("take_log", "const int", "0: back-project the values as they are"),
        Arg("counted_first", "const int", "rows counted in clipped: the chunk's own,"),
        Arg("counted_stop", "const int", "not the margins of later stages"),
        Arg("clipped", "__global uint *", "counts the values replaced"),
        Arg("out", "__global float *", "n_angles x n_rows x n_bins (intensity)" if intensity
            else "n_rows x n_angles x n_bins"),
    )


def source(raw_type: str, real: str, intensity: bool = False) -> str:
    return codegen.render("stages/normalize.cl.mako",
                          {"sinograms_from_projections": arguments(raw_type, real, intensity)},
                          raw_type=raw_type, real=real, intensity=intensity,
                          floor=repr(float(FLOOR_TRANSMISSION)))


class NonFinite(ValueError):
    """A chunk's ``count`` values are NaN or Inf where they are back-projected as they
    are (``log=False``); the stream that ran it sets ``rows`` ``(first, count)`` of the
    job's rows, and its caller says where the first one is (:func:`located`)."""

    def __init__(self, count):
        super().__init__(f"projections: {count} values of a chunk are NaN or Inf; {ADVICE}")
        self.count, self.rows = count, None


ADVICE = ("with log=False the values are back-projected as they are: replace them first "
          "(numpy.nan_to_num), or pass flats and darks")


def located(exc: NonFinite, projections, first) -> ValueError:
    """``exc`` as one line naming the first NaN or Inf of its rows: read again from
    ``projections`` (the job's rows from detector row ``first``), one chunk."""
    a, count = exc.rows
    block = np.asarray(projections[:, first + a:first + a + count])
    where = np.argwhere(~np.isfinite(block))
    if not len(where):  # the data changed since it was read
        return ValueError(str(exc))
    p, r, b = (int(v) for v in where[0])
    return ValueError(f"projections: {exc.count} values of detector rows {first + a}.."
                      f"{first + a + count - 1} are NaN or Inf, the first at projection {p}, "
                      f"row {first + a + r}, bin {b}; {ADVICE}")


class Normalize(Stage):
    """Projections of ``dtype`` (see :func:`raw_dtype`) of ``n_angles`` x rows x
    ``n_bins`` to sinograms, normalised with the dark and flat means uploaded with each
    chunk (without them the data are taken as normalised) and, with ``log``, taken
    ``-log`` of; with ``intensity``, to the normalised values in the projections'
    layout (buffer ``intensity``), for phase retrieval to filter and take ``-log`` of. The arithmetic is in double where the device has it: the FBP
    amplifies float32's rounding of the ratio and the log several times."""

    name = "normalise"
    uploads = ("dark", "flat")
    reports = ("clipped",)

    def __init__(self, context, device, n_angles, n_bins, dtype, log=True, intensity=False):
        self.n_angles, self.n_bins, self.log = n_angles, n_bins, log and not intensity
        self.dtype = np.dtype(dtype)
        real = "double" if "cl_khr_fp64" in device.extensions else "float"
        self.real = np.dtype(np.float64 if real == "double" else np.float32)
        raw_type = RAW_TYPES[self.dtype]
        self.kernel = codegen.declared(context, device, source(raw_type, real, intensity),
                                       "sinograms_from_projections",
                                       arguments(raw_type, real, intensity))
        plane = n_angles * n_bins
        self.output = "intensity" if intensity else "sinograms"
        self.needs = (Need("raw", plane * self.dtype.itemsize),
                      Need("dark", n_bins * self.real.itemsize, host=self.real),
                      Need("flat", n_bins * self.real.itemsize, host=self.real),
                      Need("clipped", fixed=4, host=np.dtype(np.uint32)),
                      Need(self.output, plane * 4))
        self.intensity = intensity
        self._zeros = Zeros()

    def enqueue(self, chunk):
        b, q = chunk.buffers, chunk.queue
        return [("normalise", cl.enqueue_copy(q, b["clipped"], self._zeros(1),
                                                is_blocking=False)),
                ("normalise", self.kernel(
                    q, (-(-self.n_bins // BIN_ITEMS) * BIN_ITEMS, self.n_angles, chunk.count),
                    (BIN_ITEMS, 1, 1), projections=b["raw"], dark=b["dark"], flat=b["flat"],
                    n_angles=self.n_angles, n_rows=chunk.count, n_bins=self.n_bins,
                    flat_field="dark" in chunk.uploaded, take_log=self.log,
                    counted_first=chunk.margins[0],
                    counted_stop=chunk.count - chunk.margins[1], clipped=b["clipped"],
                    out=b[self.output]))]

    def reported(self, counts):
        """Values replaced (see FLOOR_TRANSMISSION); with ``log=False`` any (NaN or
        Inf) is an error."""
        count = counts["clipped"]
        if count and not self.log and not self.intensity:
            raise NonFinite(count)
        return count

