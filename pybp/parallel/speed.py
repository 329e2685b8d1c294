"""Which CPU runtime pybp takes where several work and no GPU is there: the one that runs
pybp's own default back-projection fastest on this machine, timed once per device and
driver (kept with the device's probe, :func:`pybp.cl.device.record_speed`), then chosen
by :func:`pybp.cl.device.select_device` from the record.

No fixed order holds: on one 2-core machine PoCL ran the ALU kernel at 1.40 GU/s against
Intel's runtime's 0.93 (docs/portability.md), on another Intel's ran ``pybp demo`` at
0.86 against PoCL's 0.50. A small kernel of its own timed in the probe ranked
them 3:1 where pybp's kernels ran them 1:1: the kernel timed is pybp's, with the
parameters the profiler gives it.
"""

from __future__ import annotations

import os

import numpy as np

from pybp.cl.device import (ENV_DEVICE, device_type_name, probe, record_speed,
                            usable_devices)
from pybp.parallel.prepare import Setup, ParallelRecipe

SIZE = 256  # bins, angles and slice width of the case timed
REPEATS = 3


def choose_cpu_runtime():
    """Time pybp's back-projection on each CPU runtime that was not timed yet, where
    the choice is among CPU runtimes: no device named (``PYBP_DEVICE``), no GPU or
    accelerator, two CPU runtimes or more that work. The first call on a machine
    builds the default kernels on each (seconds); later calls read the record."""
    if os.environ.get(ENV_DEVICE):
        return
    found = [d for d in usable_devices(warn=False) if device_type_name(d) != "simulator"]
    cpus = [d for d in found if device_type_name(d) == "cpu"]
    if len(cpus) < 2 or len(cpus) < len(found):
        return
    for device in cpus:
        if not probe(device).speed:
            record_speed(device, timed(device))


def timed(device) -> float:
    """GU/s of the default back-projection of one slice of ``SIZE``^2 on ``device``:
    the fastest of ``REPEATS`` calls after one."""
    angles = np.linspace(0, np.pi, SIZE, endpoint=False)
    data = np.random.default_rng(0).random((1, SIZE, SIZE)).astype(np.float32)
    recipe = ParallelRecipe(Setup(SIZE, angles, slices_per_pass=1, verify=False), device=device)
    try:
        out = np.empty((1, SIZE, SIZE), np.float32)
        best = float("inf")
        for k in range(REPEATS + 1):
            recipe.executor.stage_seconds.clear()
            recipe.sinograms(data, out)
            if k:
                best = min(best, recipe.executor.stage_seconds["backproject"])
        return SIZE ** 3 / best * 1e-9
    finally:
        recipe.close()
