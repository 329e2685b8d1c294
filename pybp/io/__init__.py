"""Files in and out: scans (DXchange, NXtomo, TIFF, npy) and slices (TIFF folder,
HDF5, npy), for :func:`pybp.reconstruct` and ``pybp reconstruct``."""

from .readers import open_scan
from .scan import Scan
from .writers import open_output, read_slices

__all__ = ["Scan", "open_scan", "open_output", "read_slices"]
