"""FBP filter windows (scikit-image's names and shapes) and the on-device filtering.

The ramp is built in real space and transformed (Kak & Slaney, Ch. 3, Eq. 61), which
avoids the DC error of a sampled ``|f|``; projections are zero-padded to at least twice
their width. The device applies it as a linear convolution with the real-space taps of
the padded filter, which equals the padded FFT product exactly.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from . import codegen

FILTERS = ("ramp", "shepp-logan", "cosine", "hamming", "hann")


def padded_size(n_bins: int) -> int:
    """Zero-padded length: the next power of two of at least twice the width (min 64)."""
    return max(64, int(2 ** np.ceil(np.log2(2 * n_bins))))


def fourier_filter(name: str, size: int) -> np.ndarray:
    """The filter's frequency response at ``np.fft.fftfreq(size)`` (cycles per bin)."""
    if name not in FILTERS:
        raise ValueError(f"filter: expected one of {', '.join(FILTERS)}; got {name!r}")
    n = np.concatenate([np.arange(1, size // 2 + 1, 2), np.arange(size // 2 - 1, 0, -2)])
    ramp_space = np.zeros(size)
    ramp_space[0] = 0.25
    ramp_space[1::2] = -1.0 / (np.pi * n) ** 2
    response = np.real(np.fft.fft(ramp_space))
    omega = 2 * np.pi * np.fft.fftfreq(size)
    if name == "shepp-logan":
        response[1:] *= np.sin(omega[1:] / 2) / (omega[1:] / 2)
    elif name == "cosine":
        response *= np.fft.fftshift(np.sin(np.linspace(0, np.pi, size, endpoint=False)))
    elif name == "hamming":
        response *= np.fft.fftshift(np.hamming(size))
    elif name == "hann":
        response *= np.fft.fftshift(np.hanning(size))
    return response


def filter_taps(name: str, n_bins: int) -> np.ndarray:
    """Real-space taps for offsets ``-(n_bins-1) .. n_bins-1`` (index ``d + n_bins - 1``)."""
    size = padded_size(n_bins)
    kernel = np.real(np.fft.ifft(fourier_filter(name, size)))
    offsets = np.arange(-(n_bins - 1), n_bins)
    return kernel[offsets % size]


def filter_numpy(sinograms, name: str, weights) -> np.ndarray:
    """Float64 reference: padded FFT filtering times each angle's weight."""
    sinograms = np.asarray(sinograms, np.float64)
    n_bins = sinograms.shape[-1]
    size = padded_size(n_bins)
    spectrum = np.fft.fft(sinograms, n=size, axis=-1) * fourier_filter(name, size)
    filtered = np.real(np.fft.ifft(spectrum, axis=-1))[..., :n_bins]
    return filtered * np.asarray(weights)[:, None]


class DeviceFilter:
    """Filters rows of sinograms on the device (any OpenCL device; no FFT library)."""

    def __init__(self, context, name, geometry):
        self.n_bins, self.n_angles = geometry.n_bins, geometry.n_angles
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        self.taps = cl.Buffer(context, flags,
                              hostbuf=filter_taps(name, self.n_bins).astype(np.float32))
        self.weights = cl.Buffer(context, flags,
                                 hostbuf=geometry.angle_weights().astype(np.float32))
        self.kernel = cl.Program(context, codegen.render_filter()).build().filter_rows

    def __call__(self, queue, source, destination, n_slices):
        tile = codegen.FILTER_TILE
        rows = n_slices * self.n_angles
        return self.kernel(queue, (-(-self.n_bins // tile) * tile, rows), (tile, 1),
                           source, self.taps, self.weights,
                           np.int32(self.n_bins), np.int32(self.n_angles), destination)
