"""Scans to try the file path on: the 3-D Shepp-Logan phantom (pybp/phantoms.py) seen
by a detector with flats, darks and noise, in parallel beam with its axis off the
detector's middle or in cone beam on a circular orbit, written as DXchange HDF5 (what
``pybp demo --write-scan`` and ``pybp demo --cone --write-scan`` make)."""

from __future__ import annotations

import numpy as np

from pybp import phantoms
from pybp.geometry.cone import ConeGeometry
from pybp.geometry.parallel import ParallelGeometry
from pybp.io.scan import need

ATTENUATION = 2.0  # largest line integral, so that the flats' counts stay well above dark


def phantom_scan(n_bins=256, n_rows=64, n_angles=None, span_degrees=180.0, axis_offset=3.7,
                 n_frames=10, seed=0):
    """``(angles_degrees, projections, flats, darks, center, scale)``: uint16 counts of
    the phantom with its axis at ``(n_bins - 1) / 2 + axis_offset``; ``scale`` is the
    attenuation per pixel of phantom value 1 (the reconstruction is the phantom times it)."""
    n_angles = n_angles or int(round(n_bins * span_degrees / 180.0))
    degrees = np.arange(n_angles) * (span_degrees / n_angles)
    center = (n_bins - 1) / 2.0 + axis_offset
    geometry = ParallelGeometry.create(n_bins, np.deg2rad(degrees), center=center)
    radius = n_bins / 2.0 * 0.9
    scale = ATTENUATION / (2 * 0.92 * radius)  # the longest chord through value 1
    line_integrals = phantoms.shepp_logan_3d_radon(geometry, n_rows, radius) * scale
    projections, flats, darks = phantoms.detector_counts(line_integrals, n_frames, seed=seed)
    return degrees, projections, flats, darks, center, scale


def cone_circular(n=128):
    """The cone-beam demo's orbit and volume (lengths in voxels of 1 mm): ``n``^3 voxels,
    the source 3 ``n`` from the axis, magnification 1.5, pixels of 1.5 mm, a detector of
    ``n`` x ``1.25 n`` pixels that sees the whole phantom: keyword arguments of
    :meth:`ConeGeometry.circular` and ``pybp.cone.kind.write_circular``, with
    ``detector_shape``."""
    return dict(detector_shape=(n, n + n // 4), source_origin=3.0 * n, origin_detector=1.5 * n,
                pixel_size=1.5, volume_shape=(n, n, n), voxel_size=1.0)


def cone_scan(n=128, n_angles=None, n_frames=10, seed=0):
    """``(geometry, angles_degrees, projections, flats, darks, scale)``: uint16 counts of
    the 3-D phantom over 360 degrees (``n_angles``, default ``2 n``) in the
    :func:`cone_circular` orbit; the FDK volume is the phantom times ``scale``."""
    n_angles = n_angles or 2 * n
    degrees = np.arange(n_angles) * (360.0 / n_angles)
    geometry = ConeGeometry.circular(np.deg2rad(degrees), **cone_circular(n))
    radius = phantoms.cone_radius(geometry)
    scale = ATTENUATION / (2 * 0.92 * radius)
    line_integrals = phantoms.shepp_logan_cone(geometry, radius) * scale
    projections, flats, darks = phantoms.detector_counts(line_integrals, n_frames, seed=seed)
    return geometry, degrees, projections, flats, darks, scale


def write_dxchange(path, projections, flats, darks, degrees, overwrite=False):
    """A DXchange file: ``/exchange/data``, ``data_white``, ``data_dark`` and
    ``theta`` (degrees), projections chunked a frame at a time."""
    h5py = need("h5py")
    with h5py.File(path, "w" if overwrite else "w-") as f:
        f.create_dataset("exchange/data", data=projections,
                         chunks=(1,) + projections.shape[1:])
        f.create_dataset("exchange/data_white", data=flats)
        f.create_dataset("exchange/data_dark", data=darks)
        f.create_dataset("exchange/theta", data=np.asarray(degrees, np.float64))
        f["exchange/theta"].attrs["units"] = "degrees"
