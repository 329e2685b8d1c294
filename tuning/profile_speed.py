#!/usr/bin/env python3
"""GU/s of the profile's ALU kernel for every setting, with whichever pybp Python finds.

    python tuning/profile_speed.py LABEL [--size 2048] [--repeats 5]

Prints one line per (slices, interpolation, storage): the label, the setting, GU/s
(median of the repeats after a warm-up, kernel time) and the parameter set. To compare
two versions in one device call, run it against each checkout in turn, for example
``(cd ../old && PYTHONPATH=$PWD python3 /path/to/profile_speed.py old)`` and then
``python3 tuning/profile_speed.py new`` (the script's own folder holds no package, so
PYTHONPATH decides which pybp runs). Pick the device with PYBP_DEVICE.
"""

import argparse
import sys

import numpy as np

import pybp
from pybp.tune.search import gups


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("label")
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    angles = np.linspace(0, np.pi, args.size, endpoint=False)
    data = np.random.default_rng(2).random((4, args.size, args.size)).astype(np.float32)
    print(f"{args.label}: {pybp.__file__}", flush=True)
    for slices in (1, 2, 4):
        for interpolation in ("linear", "nearest"):
            for storage in ("float", "half"):
                bp = pybp.Backprojector(args.size, angles, kernel="alu", slices_per_pass=slices,
                                        interpolation=interpolation, precision=storage)
                speed = gups(bp, data[:slices], args.repeats)
                print(f"{args.label} v{slices} {interpolation} {storage} {speed:.0f} "
                      f"{bp.params.key()}", flush=True)
                del bp
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
