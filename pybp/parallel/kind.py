"""Parallel beam as the registry's kind (pybp/registry.py): a slice per detector row,
each slice its own problem, parallel beam's matched pair of pybp/parallel/project.py, and
its volumes streamed through the devices (pybp/parallel/volumes.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from pybp import checks
from pybp.cl.device import describe, open_device
from pybp.geometry.parallel import ParallelGeometry
from pybp.iterative.one import OneDevice
from pybp.parallel import project, volumes


@dataclass(frozen=True)
class ParallelKind:
    """:class:`pybp.registry.Kind` of a :class:`pybp.ParallelGeometry`."""

    geometry: type = ParallelGeometry
    name: str = "ParallelGeometry"
    what: str = "parallel beam"
    whole: bool = False
    dims: int = 2
    filtered: str | None = "FBP"
    advice: str = "take fewer rows per call, or a device with more memory"
    file_keys: tuple = ()  # no geometry file: the command takes the scan's angles
    astra_types: tuple = ()
    flag: str | None = None  # the commands' default
    commands: tuple = (("reconstruct", "pybp.cli.files:reconstruct"),
                       ("demo", "pybp.cli.parallel:demo"), ("render", "pybp.cli.parallel:render"),
                       ("bench", "pybp.cli.parallel:bench"), ("tune", "pybp.cli.parallel:tune"))

    def reader(self, key):
        raise KeyError(key)

    def command_geometry(self, geometry):
        return geometry

    def shapes(self, geometry, slices=None) -> tuple:
        """``slices`` slices and ``(n_angles, slices, n_bins)``."""
        ny, nx = geometry.slice_shape
        return (slices, ny, nx), (geometry.n_angles, slices, geometry.n_bins)

    def scratch_bytes(self, geometry, slices=None) -> int:
        """The pair's stacked volumes and projections."""
        return project.scratch_bytes(geometry, slices)

    def pair(self, geometry, slices, context, queue, device):
        return project.ParallelPair(geometry, slices, context, queue, device)

    def describe(self, geometry, slices=None) -> str:
        ny, nx = geometry.slice_shape
        return (f"{slices} slices of {ny} x {nx} from {geometry.n_angles} angles of "
                f"{geometry.n_bins} bins")

    def takes_in_place(self, geometry) -> bool:
        """The angles of a scan (checked against the projections by the stream)."""
        return True

    def cut(self, geometry, slices) -> int:
        """Slices at once: one by default."""
        return 1 if slices is None else checks.positive_int(slices, "slices")

    def method_data(self, geometry, projections, circle) -> tuple:
        """``(n_angles, rows, n_bins)``, or one sinogram ``(n_angles, n_bins)`` as one row."""
        single = len(projections.shape) == 2
        expected = (geometry.n_angles, geometry.n_bins)
        if (tuple(projections.shape) if single else
                (projections.shape[0], projections.shape[2])) != expected:
            raise ValueError(f"projections: expected (n_angles, rows, n_bins) or "
                             f"(n_angles, n_bins) with n_angles, n_bins = {expected} (the "
                             f"geometry's), got {tuple(projections.shape)}")
        data = np.empty(projections.shape, np.float32)
        checks.cast_into(data, projections)
        return (data[:, None] if single else data), single

    def method_devices(self, method, geometry, slices, device, devices, check):
        """One device (several share slices out through :func:`pybp.reconstruct`)."""
        if devices is not None:
            raise TypeError(f"devices: pybp.{method} of parallel beam runs on one device; "
                            f"pybp.reconstruct(projections, geometry, method='{method}', "
                            "iterations=..., devices=...) shares its slices out")
        cl_device, context, _ = open_device(device)
        description = describe(cl_device)
        check(description, slices)
        queue = cl.CommandQueue(context)
        return OneDevice(self.pair(geometry, slices, context, queue, description), context,
                         queue, description)

    def reconstruct(self, projections, geometry, flats, darks, center, rows, out, *,
                    solve, **options):
        """The stream of detector rows (:func:`pybp.parallel.volumes.reconstruct`), which
        runs the methods on each chunk of slices itself."""
        return volumes.reconstruct(projections, geometry, flats, darks, center, rows, out,
                                   **options)


KIND = ParallelKind()
