#!/usr/bin/env python3
"""How far the ALU kernel's oversampling mode (Sect. 7.2) is from exact linear
interpolation, by detector size, on the FBP of the Shepp-Logan phantom.

    python tuning/oversample_error.py [BINS ...]     (default: 255 511 1023 2048)

Each size uses as many angles as bins over 180 degrees. The exact ALU linear kernel,
3e-7 from the float64 reference, stands in for it at sizes where NumPy would be slow.
Prints the relative RMS of oversampling and, for scale, of nearest interpolation; pick
the device with PYBP_DEVICE.
"""

import sys

import numpy as np

import pybp
from pybp import phantoms
from pybp.parallel import reference
from pybp.geometry.parallel import ParallelGeometry


def errors(n_bins):
    angles = np.linspace(0, np.pi, n_bins, endpoint=False)
    sinogram = phantoms.shepp_logan_radon(ParallelGeometry.create(n_bins, angles)).astype(np.float32)
    results = {}
    for name, interpolation, cache in (("exact", "linear", "pair"),
                                       ("oversample", "linear", "oversample"),
                                       ("nearest", "nearest", "plain")):
        bp = pybp.Backprojector(n_bins, angles, kernel="alu", filter="ramp", slices_per_pass=1,
                                interpolation=interpolation, overrides=dict(cache=cache))
        results[name] = bp(sinogram)
    return (reference.relative_rms(results["oversample"], results["exact"]),
            reference.relative_rms(results["nearest"], results["exact"]))


def main(argv):
    sizes = [int(a) for a in argv] or [255, 511, 1023, 2048]
    print("| bins | oversample, relative RMS vs exact linear | nearest |")
    print("| --- | --- | --- |")
    for n_bins in sizes:
        oversample, nearest = errors(n_bins)
        print(f"| {n_bins} | {oversample:.4f} | {nearest:.4f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
