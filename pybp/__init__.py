"""pybp: parallel-beam (filtered) back-projection on any OpenCL device.

>>> import numpy as np, pybp
>>> angles = np.linspace(0, np.pi, 180, endpoint=False)
>>> slice_ = pybp.fbp(sinogram, angles)            # doctest: +SKIP
>>> volume = pybp.reconstruct(projections, angles, flats, darks)  # doctest: +SKIP
"""

from .device import devices
from .filters import FILTERS
from .reconstruct import reconstruct
from .runner import Backprojector, backproject, fbp

__all__ = ["Backprojector", "backproject", "fbp", "reconstruct", "devices", "FILTERS"]
__version__ = "0.1.0"
