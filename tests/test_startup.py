"""Issue 24, item 5: the whole ``pybp reconstruct`` of a tiny scan (kernels cached)
costs at most 2.5 times the bare ``python -c "import pyopencl, h5py, numpy"``, both
timed from the shell's side in the same run (tuning/startup_time.py). The suite guards
the children's CPU time at 3x (see the test); it runs first (tests/conftest.py)."""

import importlib.util
import statistics
from pathlib import Path

import pytest

from conftest import device_is_gpu

TOOL = Path(__file__).resolve().parents[1] / "tuning" / "startup_time.py"
spec = importlib.util.spec_from_file_location("startup_time", TOOL)
startup_time = importlib.util.module_from_spec(spec)
spec.loader.exec_module(startup_time)


@pytest.mark.skipif(device_is_gpu(), reason="a CPU's start-up: a GPU driver's own is not ours")
def test_tiny_scan_costs_at_most_three_bare_imports(tmp_path):
    """The fastest of 11 runs of each, by CPU time (user and system) of each child.
    Wall time was guarded before, at 3x, and CI failed it twice at 94% of the suite:
    0.699 s against 0.231 s (3.02x), then 0.703 s against 0.224 s (3.14x), where the
    same commit alone measured 0.39-0.41 s against 0.20 s. A child's CPU time is not
    slowed by other work waiting for the two cores. On this development machine alone:
    wall 2.41x, CPU 1.95x; beside a process spinning on one core: wall 2.05x, CPU 1.81x.
    What the guard is for stays as large in CPU time: a kernel built from source is
    20 ms of it, an eager import of scipy or Dask 0.1-0.3 s."""
    bare, ours = startup_time.measure(runs=11, folder=tmp_path)
    cpu_bare, cpu_ours = min(b for _, b in bare), min(o for _, o in ours)
    ratio = cpu_ours / cpu_bare
    assert ratio <= 3.0, (f"pybp reconstruct of the tiny scan took {cpu_ours:.3f} s of CPU at "
                          f"best, {ratio:.2f}x the bare imports' {cpu_bare:.3f} s (wall: "
                          f"{min(w for w, _ in ours):.3f} s at best, median "
                          f"{statistics.median(w for w, _ in ours):.3f}, against "
                          f"{min(w for w, _ in bare):.3f} s)")
