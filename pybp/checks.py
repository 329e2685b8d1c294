"""Validation at the boundary (the public calls and the command): each check names the
argument it refuses; code inside the package trusts what passed."""

from __future__ import annotations

import math
import operator
import os

import numpy as np

HOST_MEMORY_SHARE = 0.5  # of this machine's memory, the most one array pybp makes may take
_TOO_HARD = getattr(np, "exceptions", np).TooHardError  # np.exceptions from NumPy 1.25


def positive_int(value, name):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value}")
    return int(value)


def memory_limit(value):
    """``value`` as bytes of device memory (None: the default), or ``ValueError``."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)) or not 1 <= value < float("inf"):
        raise ValueError(f"memory_limit: expected a positive, finite number of bytes, got "
                         f"{value!r}")
    return int(value)


def distinct_angles(angles) -> int:
    """How many distinct angles, counted up to two (enough to reconstruct). Not
    ``np.unique``: it imports numpy.ma, 8 ms of every start-up."""
    angles = np.asarray(angles).ravel()
    if angles.size == 0:
        return 0
    return 1 if bool(np.all(angles == angles[0])) else 2


def flag(value, name) -> bool:
    """``value`` as a bool: True or False (NumPy's too), or ``TypeError`` naming
    ``name``. Python takes any non-empty string as true, and ``log="no"`` would take the
    log."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected True or False, got {value!r}")
    return bool(value)


def log_option(log, flats) -> bool:
    """``log`` of a call of detector data: as given (True or False), or None for the
    default, which takes the log where flats are given (FDK's rule)."""
    return flats is not None if log is None else flag(log, "log")


def choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def circle_option(circle):
    """``circle``: False, True (the reconstruction circle) or a radius in pixels."""
    if isinstance(circle, (bool, np.bool_)):
        return bool(circle)
    try:
        radius = float(circle)
    except (TypeError, ValueError):
        raise TypeError(f"circle: expected True, False or a radius in pixels, got "
                        f"{circle!r}") from None
    if not radius > 0 or not np.isfinite(radius):
        raise ValueError(f"circle: expected a positive radius in pixels, got {circle!r}")
    return radius


def as_sinogram_stack(sinograms, geometry, name="sinograms"):
    """Check user data against the geometry; return a C-contiguous float32 3-D view.

    Returns ``(stack, was_single, peaks)``: a 2-D sinogram becomes a stack of one;
    ``peaks`` is each slice's largest absolute value.
    """
    if not hasattr(sinograms, "shape") or not hasattr(sinograms, "dtype"):
        raise TypeError(f"{name}: expected a numpy array, got {type(sinograms).__name__}")
    dtype = np.dtype(sinograms.dtype)
    if dtype.kind not in "iuf" or dtype.kind == "f" and dtype.itemsize > 8:
        raise TypeError(f"{name}: expected real numbers (float32 preferred), got dtype {dtype}")
    if sinograms.ndim not in (2, 3):
        raise ValueError(
            f"{name}: expected (n_angles, n_bins) or (n_slices, n_angles, n_bins), "
            f"got shape {sinograms.shape}"
        )
    single = sinograms.ndim == 2
    stack = sinograms[None] if single else sinograms
    if stack.shape[0] == 0 or stack.size == 0:
        raise ValueError(f"{name}: is empty (shape {sinograms.shape})")
    if stack.shape[1] != geometry.n_angles:
        raise ValueError(
            f"{name}: has {stack.shape[1]} projections (axis -2) but {geometry.n_angles} angles were given"
        )
    if stack.shape[2] != geometry.n_bins:
        raise ValueError(
            f"{name}: has {stack.shape[2]} bins (last axis) but the back-projector was made for {geometry.n_bins}"
        )
    with np.errstate(over="ignore"):  # values beyond float32 become inf: reported below
        stack = np.ascontiguousarray(stack, dtype=np.float32)
    # max and min propagate NaN and Inf: one check, and each slice's peak for half
    # storage's scale, without a temporary array.
    peaks = np.maximum(stack.max(axis=(1, 2)), -stack.min(axis=(1, 2))).astype(np.float64)
    if not np.isfinite(peaks).all():
        beyond = dtype.kind == "f" and dtype.itemsize > 4 and np.isfinite(sinograms).all()
        raise ValueError(f"{name}: contains NaN or Inf" if not beyond else
                         f"{name}: holds values beyond float32's range (3.4e38)")
    return stack, single, peaks


def cast_into(destination, values, name="projections"):
    """``destination[...] = values``, converting; a finite value beyond the
    destination's range (1e300 into float32) is refused by ``name`` where NumPy would
    warn and make it inf, which a later check would call "NaN or Inf"."""
    with np.errstate(over="raise"):
        try:
            np.copyto(destination, values, casting="unsafe")
        except FloatingPointError:
            raise ValueError(f"{name}: hold values beyond {np.dtype(destination.dtype)}'s "
                             f"range ({float(np.finfo(destination.dtype).max):.2g}); scale "
                             "them down") from None


def _overlaps(out, given) -> bool:
    """Whether ``out`` and ``given`` hold some of the same values: NumPy arrays sharing
    memory, or one HDF5 dataset."""
    if isinstance(out, np.ndarray) and isinstance(given, np.ndarray):
        if not np.may_share_memory(out, given):
            return False
        try:
            return bool(np.shares_memory(out, given, max_work=1 << 16))
        except _TOO_HARD:
            return True
    out_file, given_file = (getattr(getattr(a, "file", None), "filename", None)
                            for a in (out, given))
    return out_file is not None and out_file == given_file and \
        getattr(out, "name", None) == getattr(given, "name", None)


def check_output(out, shape, name="out", inputs=None):
    """Check an array the caller gives for the result (numpy, memmap, h5py dataset);
    ``inputs`` (name -> array) must not overlap it: the result would overwrite data
    still to be read."""
    for input_name, given in (inputs or {}).items():
        if given is not None and _overlaps(out, given):
            raise ValueError(f"{name}: holds the same memory as {input_name}, which it would "
                             "overwrite while reading it; give another array for the result")
    if not hasattr(out, "shape") or not hasattr(out, "dtype"):
        raise TypeError(f"{name}: expected an array with shape {shape}, got {type(out).__name__}")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(out.shape)}")
    if np.dtype(out.dtype).kind != "f":
        raise TypeError(f"{name}: expected a floating-point array, got dtype {out.dtype}")
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        raise ValueError(f"{name}: the array is read-only")
    mode = getattr(getattr(out, "file", None), "mode", None)  # an h5py dataset's file
    if mode == "r":
        raise ValueError(f"{name}: the HDF5 file {out.file.filename} is open read-only; "
                         "open it with mode 'r+' or 'a'")
    return out


def float_array(value, name, ndim):
    """``value`` as finite float64 numbers of ``ndim`` dimensions, or an error naming
    ``name``."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise TypeError(f"{name}: expected a numeric array, got {type(value).__name__}") from exc
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name}: expected real numbers, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimension(s), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name}: is empty")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or Inf")
    return arr


LENGTHS = (1e-100, 1e100)  # lengths (and matrix entries) the float64 geometries handle:
# their products, determinants and squares stay finite and normal


def in_length_range(values, name):
    """``values`` (float64) with magnitudes within :data:`LENGTHS` (or zero)."""
    size = np.abs(values)
    if ((size > LENGTHS[1]) | ((size > 0) & (size < LENGTHS[0]))).any():
        raise ValueError(f"{name}: values from {LENGTHS[0]:g} to {LENGTHS[1]:g} (or 0) in "
                         f"magnitude are what the geometry is computed with; got "
                         f"{values.ravel()[np.argmax(np.abs(np.log10(size + (size == 0))))]:g}: "
                         "is the unit right?")
    return values


def positive_length(value, name) -> float:
    """A positive length (a pixel's or voxel's size, a distance), or an error naming
    ``name``."""
    if np.ndim(value) != 0:
        raise TypeError(f"{name}: expected a number, got {value!r}")
    value = float(float_array([value], name, 1)[0])
    if not value > 0:
        raise ValueError(f"{name}: expected a positive length, got {value}")
    return float(in_length_range(np.array([value]), name)[0])


def array_like(value, name, ndim):
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise TypeError(f"{name}: expected an array (NumPy, memmap, h5py dataset), "
                        f"got {type(value).__name__}")
    if len(value.shape) not in ndim:
        raise ValueError(f"{name}: expected {' or '.join(f'{n}-D' for n in ndim)} data, "
                         f"got shape {tuple(value.shape)}")
    if np.dtype(value.dtype).kind not in "iuf":
        raise TypeError(f"{name}: expected integers or floats, got dtype {value.dtype}")
    if 0 in value.shape:
        raise ValueError(f"{name}: is empty (shape {tuple(value.shape)})")
    return value


def row_range(rows, n_rows):
    if rows is None:
        return 0, n_rows
    try:
        first, stop = (operator.index(r) for r in rows)
    except (TypeError, ValueError):
        raise ValueError(f"rows: expected (first, stop), two integers, got {rows!r}") from None
    if not 0 <= first < stop <= n_rows:
        raise ValueError(f"rows: expected 0 <= first < stop <= {n_rows} (the projections' "
                         f"rows, axis 1), got ({first}, {stop})")
    return first, stop


def frames(reference, name, detector):
    """Flats or darks as ``(n_frames, n_rows, n_bins)`` (one 2-D frame is allowed)."""
    array_like(reference, name, (2, 3))
    shape = tuple(reference.shape)
    if shape[-2:] != detector:
        raise ValueError(f"{name}: frames of {shape[-2]}x{shape[-1]} (rows x bins) do not match "
                         f"the projections' {detector[0]}x{detector[1]}")
    return reference


def flat_field_frames(flats, darks, detector) -> tuple:
    """``(flats, darks)`` checked against the detector ``(n_rows, n_bins)``: the one rule
    of every call that normalises counts, either geometry. Darks need flats; flats alone
    are counts above a dark of zero (one frame of zeros); neither, data normalised
    already."""
    if flats is None:
        if darks is not None:
            raise ValueError("darks: given without flats; give both, or flats alone (a dark "
                             "of zero)")
        return None, None
    flats = frames(flats, "flats", tuple(detector))
    if darks is None:
        return flats, np.zeros((1,) + tuple(detector), np.float32)
    return flats, frames(darks, "darks", tuple(detector))


def projection_inputs(projections, flats, darks, rows):
    """The checked ``(n_angles, n_rows, n_bins)``, ``first``, ``stop``, ``flats`` and
    ``darks`` of a call (nothing is read; :func:`flat_field_frames`)."""
    array_like(projections, "projections", (3,))
    n_angles, n_rows, n_bins = (int(n) for n in projections.shape)
    first, stop = row_range(rows, n_rows)
    flats, darks = flat_field_frames(flats, darks, (n_rows, n_bins))
    return (n_angles, n_rows, n_bins), first, stop, flats, darks


def host_memory() -> int:
    """Bytes of memory of this machine."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62  # unknown: not checked


def within_host_share(n_bytes: int) -> bool:
    """Whether ``n_bytes`` fit in :data:`HOST_MEMORY_SHARE` of this machine's memory:
    the rule for every large array pybp makes in host memory (a volume, cone beam's
    store of filtered projections, a demo's scan)."""
    return n_bytes <= HOST_MEMORY_SHARE * host_memory()


def check_demo_memory(n_bytes: int, what: str, option: str = "--size"):
    """Refuse, naming ``option``, a demo whose arrays would take more than
    :data:`HOST_MEMORY_SHARE` of this machine's memory (before any is made)."""
    total = host_memory()
    if not within_host_share(n_bytes):
        raise ValueError(f"{option}: {what} needs about {n_bytes / 2 ** 30:.3g} GiB of memory "
                         f"to make; this machine has {total / 2 ** 30:.3g} GiB: give a smaller "
                         f"{option}")


def check_volume_memory(shape, name="out"):
    """A float32 result of ``shape`` made in memory: refused, naming ``name``, where it
    would take more than :data:`HOST_MEMORY_SHARE` of this machine's memory (give an
    array on disk instead: a memmap or an HDF5 dataset)."""
    n_bytes = 4 * math.prod(int(n) for n in shape)
    total = host_memory()
    if not within_host_share(n_bytes):
        raise ValueError(f"{name}: the result {tuple(shape)} takes {n_bytes / 2 ** 30:.3g} GiB; "
                         f"this machine has {total / 2 ** 30:.3g} GiB: give {name}= an array on "
                         "disk (numpy.lib.format.open_memmap, an HDF5 dataset), or reconstruct "
                         "a part of it")


def check_host_memory(geometry, named_shape):
    """One slice, one sinogram and the filter's padded rows on the host, within
    :data:`HOST_MEMORY_SHARE` of its memory (before anything of that size is made)."""
    ny, nx = geometry.slice_shape
    padded = 2 ** int(np.ceil(np.log2(2 * geometry.n_bins)))
    need = 4 * (ny * nx + geometry.n_angles * geometry.n_bins) + 16 * padded
    total = host_memory()
    if not within_host_share(need):
        name = "slice_shape" if named_shape else "n_bins"
        raise ValueError(f"{name}: one {ny}x{nx} slice from {geometry.n_angles}x"
                         f"{geometry.n_bins} sinograms needs {need / 2 ** 30:.1f} GiB of host "
                         f"memory; this machine has {total / 2 ** 30:.1f} GiB: reconstruct a "
                         "smaller slice_shape, or a region of it with slice_offset")
