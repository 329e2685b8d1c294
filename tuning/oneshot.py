"""One-shot ``pybp.fbp`` of a ``skimage.transform.radon`` sinogram against ``iradon``
(issue 20): the median of repeated calls after a first one, each call a new
``Backprojector`` (kernels and the device's context are kept per process), the RMS of
each from the phantom, and whether the circles of ``skimage_options`` and
``iradon(circle=True)`` keep the same pixels.

    python tuning/oneshot.py --size 256 --repeats 7
"""

import argparse

import numpy as np
from skimage.data import shepp_logan_phantom
from skimage.transform import iradon, radon, resize

import pybp
from host_copies import seconds as median_seconds  # tuning/host_copies.py


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    n = args.size
    phantom = resize(shepp_logan_phantom(), (n, n), anti_aliasing=True)
    theta = np.linspace(0.0, 180.0, n, endpoint=False)
    sinogram = radon(phantom, theta, circle=True)
    options = pybp.skimage_options(n)
    ours = lambda: pybp.fbp(sinogram.T.astype(np.float32), np.radians(theta), **options)  # noqa: E731
    theirs = lambda: iradon(sinogram, theta, circle=True, filter_name="ramp")  # noqa: E731
    a, b = ours(), theirs()
    inside = np.abs(phantom) >= 0  # every pixel
    rms = lambda image: float(np.sqrt(np.mean((image - phantom)[inside] ** 2)))  # noqa: E731
    print(f"{n} bins, {n} angles")
    print(f"pybp.fbp  {median_seconds(ours, args.repeats) * 1e3:7.1f} ms   RMS {rms(a):.5f}")
    print(f"iradon    {median_seconds(theirs, args.repeats) * 1e3:7.1f} ms   RMS {rms(b):.5f}")
    print(f"circle: same pixels kept: {bool(np.array_equal(a != 0, b != 0))}")


if __name__ == "__main__":
    main()
