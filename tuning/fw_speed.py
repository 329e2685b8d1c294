#!/usr/bin/env python3
"""Fourier-wavelet ring removal (``rings="fw"``) per sinogram: pybp on a device beside the
same method in NumPy and PyWavelets (tomopy's ``remove_stripe_fw`` formula, one thread),
on the same machine in one run.

    python tuning/fw_speed.py --size 1024 --level 9 --device pthread [--kernels]

Prints milliseconds per sinogram: the median of 5 calls on 8 sinograms after one (wall
clock, the queue finished), and PyWavelets' median of 5. ``--kernels``: also each
kernel's share, each launch waited for on the wall clock (CPU runtimes' profiling
timestamps are not to be trusted), summed over the levels.
"""

import argparse
import time

import numpy as np
import pyopencl as cl

from pybp.cl.device import describe, open_device
from pybp.stages import rings, wavelets


def numpy_fw(sinogram, level, wavelet, sigma, pad):
    """tomopy's remove_stripe_fw on one sinogram (angles x bins)."""
    import pywt

    n_angles, n_bins = sinogram.shape
    rows = n_angles + n_angles // 8 if pad else n_angles
    shift = (rows - n_angles) // 2
    approximation = np.zeros((rows, n_bins), np.float32)
    approximation[shift:shift + n_angles] = sinogram
    details = []
    for _ in range(level):
        approximation, detail = pywt.dwt2(approximation, wavelet)
        details.append(list(detail))
    for detail in details:
        spectrum = np.fft.fftshift(np.fft.fft(detail[1], axis=0))
        k = (np.arange(-spectrum.shape[0], spectrum.shape[0], 2, dtype=np.float32) + 1) / 2
        spectrum *= (-np.expm1(-np.square(k) / (2 * np.square(sigma))))[:, None]
        detail[1] = np.real(np.fft.ifft(np.fft.ifftshift(spectrum), axis=0))
    for detail in details[::-1]:
        approximation = approximation[:detail[0].shape[0], :detail[0].shape[1]]
        approximation = pywt.idwt2((approximation, tuple(detail)), wavelet)
    return approximation[shift:shift + n_angles, :n_bins]


def print_kernels(method, queue, buffer, count, runs=3):
    """Milliseconds per sinogram of each kernel, every launch waited for."""
    spent = {name: 0.0 for name in method.kernels}

    def timed(name, kernel):
        def launch(*args, **kw):
            start = time.perf_counter()
            event = kernel(*args, **kw)
            event.wait()
            spent[name] += time.perf_counter() - start
            return event
        return launch

    method.kernels = {name: timed(name, k) for name, k in method.kernels.items()}
    for _ in range(runs):
        method._launch(queue, buffer, 0, count)
    total = sum(spent.values())
    for name, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"  {name:12s} {1e3 * seconds / runs / count:7.1f} ms  {100 * seconds / total:3.0f}%")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="angles and bins")
    parser.add_argument("--level", type=int, default=9)
    parser.add_argument("--device", default=None)
    parser.add_argument("--kernels", action="store_true", help="also the time of each kernel")
    args = parser.parse_args()
    cl_device, context, _ = open_device(args.device)
    device = describe(cl_device)
    queue = cl.CommandQueue(context)
    n = args.size
    params = rings.options("fw", dict(level=args.level), n, n)
    method = wavelets.FourierWavelet(context, device, n, n, **params)
    count = min(method.block, 8)
    data = np.random.default_rng(0).random((count, n, n)).astype(np.float32)
    buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                       hostbuf=data)
    times = []
    for k in range(6):
        start = time.perf_counter()
        method._launch(queue, buffer, 0, count)
        queue.finish()
        if k:
            times.append(time.perf_counter() - start)
    print(f"pybp on {device.name} ({device.platform}): "
          f"{1e3 * np.median(times) / count:.1f} ms per {n}^2 sinogram (level {args.level})")
    if args.kernels:
        print_kernels(method, queue, buffer, count)
    numpy_fw(data[0], **params)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        numpy_fw(data[0], **params)
        times.append(time.perf_counter() - start)
    print(f"NumPy and PyWavelets: {1e3 * np.median(times):.1f} ms per sinogram")


if __name__ == "__main__":
    main()
