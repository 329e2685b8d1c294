"""Device time of each kernel of ring removal (pybp/stages/rings.py, wavelets.py) on
blocks of sinograms: where the time of ``pybp bench --pipeline --rings`` goes.

    PYBP_DEVICE=nvidia python tuning/rings_speed.py --size 2048 --repeats 3
"""

import argparse
from collections import defaultdict

import numpy as np
import pyopencl as cl

from pybp.cl import pacing
from pybp.cl.device import describe, open_device
from pybp.stages import rings
from pybp.stages.wavelets import FourierWavelet


class Named:
    """A kernel launcher that records ``(name, event)`` of each launch."""

    def __init__(self, name, kernel, log):
        self.name, self.kernel, self.log = name, kernel, log

    def __call__(self, *args, **kwargs):
        event = self.kernel(*args, **kwargs)
        self.log.append((self.name, event))
        return event


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048, help="angles and bins")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    cl_device, context, _ = open_device(args.device)
    device = describe(cl_device)
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    n = args.size
    cases = {"sort": lambda: rings.SortRings(context, device, n, n, 21),
             "fw level 4": lambda: FourierWavelet(context, device, n, n,
                                                  **dict(rings.options("fw", dict(level=4), n, n)))}
    for label, make in cases.items():
        method = make()
        count = min(method.block, 8)
        data = np.random.default_rng(0).random((count, n, n)).astype(np.float32)
        buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                           hostbuf=data)
        log = []
        method.kernels = {name: Named(name, k, log) for name, k in method.kernels.items()}
        pacer = pacing.Pacer("gpu")  # launches as large as the GPU takes them
        method(queue, buffer, 0, count, pacer)
        queue.finish()
        seconds = defaultdict(list)
        for _ in range(args.repeats):
            log.clear()
            method(queue, buffer, 0, count, pacer)
            queue.finish()
            spent = defaultdict(float)
            for name, event in log:
                spent[name] += (event.profile.end - event.profile.start) * 1e-9
            for name, value in spent.items():
                seconds[name].append(value / count)
        total = sum(np.median(v) for v in seconds.values())
        print(f"{label}: {1e3 * total:.3f} ms per {n} x {n} sinogram ({count} at once), "
              f"{total * n:.2f} s for {n} of them")
        for name, values in seconds.items():
            print(f"  {name:14s} {1e3 * np.median(values):8.3f} ms")


if __name__ == "__main__":
    main()
