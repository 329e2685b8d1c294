#!/usr/bin/env python3
"""Tune pybp's kernels for the device at hand and save its profile.

    python tuning/tune.py [--budget SECONDS] [--cone] [--size N] [--device NAME_OR_INDEX]

as the README names it (`pybp tune --budget 60`); `pybp tune --help` lists every option.

Every candidate (texture or ALU family and its parameters) is verified against the
float64 reference (pybp.parallel.verify, 1024 bins) before it is timed; the fastest per (slices,
interpolation, storage) is saved in the user's cache directory, keyed by the exact
device and driver, and used by `pybp.Backprojector` from then on. Same as `pybp tune`.
"""

import sys

from pybp.cli.commands import main

if __name__ == "__main__":
    sys.exit(main(["tune"] + sys.argv[1:]))
