#!/usr/bin/env python3
"""Where the time of cone-beam FDK in slabs goes (host memory to host memory).

    python3 tuning/cone_slabs.py [--size 512] [--splits 1 2 4 8] [--repeats 3]

For one piece and for memory limits of 1/SPLIT of the volume: the wall time (median
after a warm-up), the slabs, the detector rows uploaded over those of one piece, the
host's time copying windows into page-locked staging and waiting for the device, and
the device time of each step (a profiling copy of the transfer queue), beside the
bandwidth of one page-locked upload of 1 GiB on the same device. What the slab
schedule costs is read from these, not guessed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pybp.api.cone import ConeBackprojector  # noqa: E402
from pybp.cl.device import open_device  # noqa: E402
from pybp.cl.staging import Staging  # noqa: E402
from pybp.cone import prepare  # noqa: E402
from pybp.tune.cone import geometry  # noqa: E402

PROFILING = cl.command_queue_properties.PROFILING_ENABLE


class Probe:
    """Wall time of the slab back-projector's host steps, and device time of what its
    queues ran."""

    def __init__(self):
        self.host = defaultdict(float)
        self.events = []

    def wrap(self, name, function):
        def timed(*args, **kwargs):
            tick = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.host[name] += time.perf_counter() - tick
        return timed

    def device(self) -> dict:
        seconds = defaultdict(float)
        for event in self.events:
            try:
                seconds[event.command_type] += (event.profile.end - event.profile.start) * 1e-9
            except cl.Error:
                pass
        names = {cl.command_type.NDRANGE_KERNEL: "kernels", cl.command_type.WRITE_BUFFER: "upload",
                 cl.command_type.READ_BUFFER: "download",
                 cl.command_type.COPY_BUFFER_TO_IMAGE: "images"}
        return {names.get(k, str(k)): v for k, v in seconds.items()}


def instrumented(probe):
    """Patch pybp.cone.prepare so that its queues profile and its events are kept."""
    real_enqueue_copy, real_queue = cl.enqueue_copy, cl.CommandQueue

    def enqueue_copy(*args, **kwargs):
        event = real_enqueue_copy(*args, **kwargs)
        if isinstance(event, cl.Event):
            probe.events.append(event)
        return event

    def queue(context, device=None, properties=None):
        return real_queue(context, device, properties=(properties or 0) | PROFILING)

    class Module:  # pyopencl as pybp.cone.prepare sees it
        def __getattr__(self, name):
            return getattr(cl, name)

    module = Module()
    module.enqueue_copy, module.CommandQueue = enqueue_copy, queue
    prepare.cl = module
    cls = getattr(prepare, "SlabBackprojector", None) or prepare.ParallelRecipe  # older trees: ParallelRecipe
    real_launch = cls._launch

    def launch(self, *args, **kwargs):
        events = real_launch(self, *args, **kwargs)
        probe.events.extend(events)
        return events

    cls._launch = launch
    cls._stage = probe.wrap("copy into staging", cls._stage)
    cls._wait = probe.wrap("wait for the device", cls._wait)
    if hasattr(cls, "_fill_store"):  # the code that filters once
        cls._fill_store = probe.wrap("filter once", cls._fill_store)
        cls._from_store = probe.wrap("passes from the store", cls._from_store)


def upload_bandwidth(context) -> float:
    queue = cl.CommandQueue(context)
    staging = Staging(queue)
    host = staging.array(1 << 28, np.float32)
    host[:] = 1
    buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE, host.nbytes)
    cl.enqueue_copy(queue, buffer, host)
    queue.finish()
    tick = time.perf_counter()
    for _ in range(3):
        cl.enqueue_copy(queue, buffer, host)
    queue.finish()
    seconds = (time.perf_counter() - tick) / 3
    staging.release()
    return host.nbytes / seconds * 1e-9


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--splits", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--projections", type=int, default=496)
    parser.add_argument("--detector", type=int, nargs=2, default=[960, 1248])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    probe = Probe()
    instrumented(probe)
    cl_device, context, _ = open_device(args.device)
    g = geometry(args.size, args.projections, tuple(args.detector))
    data = np.random.default_rng(0).random((g.n_angles,) + g.detector_shape, np.float32)
    out = np.empty(g.volume_shape, np.float32)
    print(f"{cl_device.name}: FDK {args.size}^3 from {g.n_angles} x {g.detector_shape}; "
          f"a page-locked upload of 1 GiB: {upload_bandwidth(context):.1f} GB/s")
    print("| limit | slabs | rows uploaded | wall s | copy into staging s | wait s | "
          "filter once s | passes from the store s | "
          "device: upload s | kernels s | images s | download s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    volume_bytes = 4 * int(np.prod(g.volume_shape))
    for split in args.splits:
        limit = None if split == 1 else volume_bytes // split
        bp = ConeBackprojector(g, filter="ramp", memory_limit=limit, context=context)
        try:
            plan = bp.plan
            rows = sum(n * count for slab in plan.slabs
                       for (_, count), (_, n) in zip(plan.passes, slab.windows))
            bp(data, out)  # warm-up
            walls, hosts, devices = [], [], []
            for _ in range(args.repeats):
                probe.host.clear()
                probe.events.clear()
                tick = time.perf_counter()
                bp(data, out)
                walls.append(time.perf_counter() - tick)
                hosts.append(dict(probe.host))
                devices.append(probe.device())
            k = int(np.argsort(walls)[len(walls) // 2])
            h, d = hosts[k], devices[k]
            print(f"| {'none' if limit is None else f'{limit >> 20} MiB'} | "
                  f"{len(plan.slabs)} ({bp.store or 'no store'}) | "
                  f"{rows / (g.n_angles * g.detector_shape[0]):.2f}x | {walls[k]:.3f} | "
                  f"{h.get('copy into staging', 0):.3f} | {h.get('wait for the device', 0):.3f} | "
                  f"{h.get('filter once', 0):.3f} | {h.get('passes from the store', 0):.3f} | "
                  f"{d.get('upload', 0):.3f} | {d.get('kernels', 0):.3f} | {d.get('images', 0):.3f} | "
                  f"{d.get('download', 0):.3f} |", flush=True)
        finally:
            bp.close()


if __name__ == "__main__":
    main()
