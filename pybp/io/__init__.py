"""Files in and out: scans (DXchange, NXtomo, TIFF, npy) and slices (TIFF folder,
HDF5, npy), for :func:`pybp.reconstruct` and ``pybp reconstruct``."""

from pybp.io.readers import open_scan
from pybp.io.scan import Scan
from pybp.io.writers import open_output, read_slices

__all__ = ["Scan", "open_scan", "open_output", "read_slices"]
