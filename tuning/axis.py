"""The rotation axis of phantom sinograms with noise (issue 20): Vo's estimate and its
refinement by the least negative slice, each with its error and time (the refinement
twice: its first call builds kernels).

    python tuning/axis.py
"""

import time

import numpy as np

from pybp import phantoms
from pybp.parallel import centre
from pybp.geometry.parallel import Geometry

for n, m in ((2048, 2048), (1024, 1024)):
    a = np.deg2rad(np.arange(m) * 180 / m)
    c = (n - 1) / 2 + 7.3
    s = phantoms.shepp_logan_radon(Geometry.create(n, a, center=c), radius=0.4 * n)
    s = s / s.max() * 2 + np.random.default_rng(0).normal(0, 0.02, s.shape)
    t = time.perf_counter()
    vo = centre.vo_center(s, a)
    t1 = time.perf_counter()
    r = centre.refine_center(s, a, vo)
    t2 = time.perf_counter()
    r = centre.refine_center(s, a, vo)
    t3 = time.perf_counter()
    print(f"{n} bins {m} angles: vo {t1 - t:.2f} s ({vo - c:+.3f} px), refine first "
          f"{t2 - t1:.2f} s, again {t3 - t2:.2f} s ({r - c:+.3f} px)")
