#!/usr/bin/env python3
"""The FBP filter by direct convolution, run twice and against the FFT filter:

    python tuning/filter_determinism.py

Two runs must agree exactly, and both match the FFT filter to float32 rounding.
"""

import numpy as np

import pybp
from pybp.parallel import reference

for n in (4096, 8192):
    a = np.linspace(0, np.pi, 256, endpoint=False)
    s = np.random.default_rng(0).standard_normal((4, 256, n)).astype(np.float32)
    f = pybp.fbp(s, a, filter_method="fft") if n == 4096 else None
    c = pybp.fbp(s, a, filter_method="convolution")
    c2 = pybp.fbp(s, a, filter_method="convolution")
    line = f"{n} bins: convolution twice, relative RMS between runs {reference.relative_rms(c, c2):.2e}"
    if f is not None:
        line += f"; convolution against FFT {reference.relative_rms(c, f):.2e}"
    print(line, flush=True)
