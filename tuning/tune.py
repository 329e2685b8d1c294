#!/usr/bin/env python3
"""Tune pybp's texture kernels for the device at hand and save its profile.

    python tuning/tune.py [--size 2048] [--device NAME_OR_INDEX] [--repeats 5]

Every candidate (kernel family, constant caching, unroll) is verified against the
float64 reference on a small case before it is timed; the fastest per (slices,
interpolation, storage) is saved in the user's cache directory, keyed by the exact
device and driver, and used by `pybp.Backprojector` from then on. Same as `pybp tune`.
"""

import sys

from pybp.cli import main

if __name__ == "__main__":
    sys.exit(main(["tune"] + sys.argv[1:]))
