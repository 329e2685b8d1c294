"""pybp: parallel-beam (filtered) back-projection, cone-beam FDK, and a matched forward
projector with SIRT, SART, CGLS and TV, on any OpenCL device.

>>> import numpy as np, pybp
>>> angles = np.linspace(0, np.pi, 180, endpoint=False)
>>> slice_ = pybp.fbp(sinogram, angles)            # doctest: +SKIP
>>> volume = pybp.reconstruct(projections, angles, flats, darks)  # doctest: +SKIP
>>> center = pybp.find_center(projections, angles, flats, darks)  # doctest: +SKIP

The names below load their modules (and pyopencl) on first use, so that the ``pybp``
command can answer Ctrl-C during its start-up with one line.
"""

import importlib

__version__ = "0.1.0"

_HOMES = {"Backprojector": "api.sinograms", "backproject": "api.oneshot", "fbp": "api.oneshot",
          "skimage_options": "api.sinograms", "reconstruct": "api.volumes",
          "Reconstructor": "parallel.volumes", "devices": "cl.device", "FILTERS": "stages.filters",
          "find_center": "parallel.centre", "ConeGeometry": "geometry.cone",
          "ConeBackprojector": "api.cone", "cone_backproject": "api.cone",
          "fdk": "api.cone", "ParallelGeometry": "geometry.parallel",
          "ParallelVectorGeometry": "geometry.parallel_vectors", "FanGeometry": "geometry.fan",
          "Projector": "api.projector", "sirt": "api.iterative", "sart": "api.iterative",
          "cgls": "api.iterative", "tv": "api.iterative"}
__all__ = sorted(_HOMES)


def __getattr__(name):
    if name in _HOMES:
        value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pybp' has no attribute {name!r}")


def __dir__():
    """The public names (and the dunders Python lists), not the helpers of this module."""
    return sorted({name for name in globals() if name.startswith("__")} | set(_HOMES)
                  | {"__version__"})
