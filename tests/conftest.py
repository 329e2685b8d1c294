"""One fixture picks the device: ``PYBP_DEVICE`` when set (the GPU machine), else the
default (PoCL on a machine with no GPU), pinned in ``PYBP_DEVICE`` for the whole session
(:func:`pytest_configure`). Results are judged by ``pybp.parallel.verify``, one rule and
one table of tolerances for tests, ``pybp tune`` and ``pybp bench``."""

import functools
import itertools
import os
import zlib

import numpy as np
import pytest

from pybp.parallel import verify
from pybp.cl.device import describe, select_device

USER_DEVICE = os.environ.get("PYBP_DEVICE", "")  # as the session was started


def pytest_configure(config):
    """Pin the test device in ``PYBP_DEVICE``, so that the commands, Dask workers and
    scripts the tests start run on the device of the results they are compared with.
    Unpinned, each process picks the fastest CPU runtime by timing them
    (pybp/parallel/speed.py), and a test's own calls record those timings: on one CI
    machine the workers of ``--scheduler local`` took Intel's runtime where the test
    process had taken PoCL, and their slices differed by 1e-8 where they must be equal
    (``--scheduler local`` now takes ``PYBP_DEVICE`` too: pybp.cl.device.default_devices). On a machine with no GPU
    the pin is PoCL where it builds kernels (what the suite's exact comparisons are
    written for: Intel's runtime vectorises the same kernel differently on different
    paths), else the default."""
    # the one-line notice of a long kernel build (a cold cache's) is left out of the
    # outputs the tests read, theirs and their commands' (a test of it sets it back)
    os.environ.setdefault("PYBP_BUILD_NOTICE", "0")
    if USER_DEVICE:
        return
    chosen = pinned_device()
    if chosen is not None:
        from pybp.cl import device
        os.environ["PYBP_DEVICE"] = str(next(i for i, d in enumerate(device.all_devices())
                                             if d.int_ptr == chosen.int_ptr))


def pytest_collection_modifyitems(session, config, items):
    """The start-up guard first: it times commands on the machine, and later tests leave
    the test process holding runtimes, threads and memory that slowed them on CI."""
    items.sort(key=lambda item: item.path.name != "test_startup.py")


def pinned_device():
    """The device the suite runs on where ``PYBP_DEVICE`` is not set: the default
    where it is a GPU, else the CPU runtime of the lowest rank that builds kernels
    (PoCL before Intel's: pybp.cl.implementations); None where there is none.
    .ci/implementations runs a subset on the other CPU runtime."""
    from pybp.cl import device, implementations
    if not device.all_devices():
        return None  # the tests that need a device say so
    chosen = select_device()
    if device.device_type_name(chosen) != "cpu":
        return chosen
    cpus = [d for d in device.usable_devices(warn=False) if device.device_type_name(d) == "cpu"]
    return min(cpus, key=lambda d: implementations.identify(d.platform.name).rank)


@functools.lru_cache(maxsize=1)
def device_is_gpu():
    """Whether the test device is a GPU: the large cases run there only (at collection
    time, so that the CPU suite lists no combination it would only skip)."""
    return describe(select_device()).type == "gpu"


@functools.lru_cache(maxsize=1)
def cpu_runtimes():
    """``PYBP_DEVICE`` values of each CPU implementation here that builds kernels (PoCL,
    Intel's runtime with the cpu extra): what the Ctrl-C tests run on, one after the
    other; just the test device on a GPU machine or where PYBP_DEVICE was set."""
    from pybp.cl import device
    if device_is_gpu() or USER_DEVICE:
        return (USER_DEVICE,)
    found = {}
    for d in device.usable_devices(warn=False):
        if device.device_type_name(d) == "cpu":
            found.setdefault(d.platform.name.strip(), d)
    return tuple(found) or ("",)


DEBIAN_POCL = "/usr/lib/x86_64-linux-gnu/libpocl.so.2"  # apt-get install pocl-opencl-icd


def two_pocl_devices(folder):
    """The environment of a child process that sees two PoCL CPU devices
    (``POCL_DEVICES="pthread pthread"``, a platform whose name holds "Portable"): the
    pocl wheel's where it builds kernels on this CPU, else Debian's PoCL 3.1 through an
    ``OCL_ICD_VENDORS`` folder of its own under ``folder`` (the wheel's PoCL 3.0 builds
    none on CPUs its LLVM 14 does not know, such as AMD Zen 5; .ci/implementations
    installs Debian's and runs these tests with ``PYBP_REQUIRE_TOOLS=1``). Skipped where
    neither is here, unless ``PYBP_REQUIRE_TOOLS=1``."""
    from pybp.cl import device
    env = dict(os.environ, POCL_DEVICES="pthread pthread")
    env.pop("PYBP_DEVICE", None)
    wheel = [d for d in device.usable_devices(warn=False) if "Portable" in d.platform.name]
    if wheel and "OCL_ICD_VENDORS" not in os.environ:
        return env
    if os.path.exists(DEBIAN_POCL):
        vendors = folder / "pocl-debian"
        vendors.mkdir(exist_ok=True)
        (vendors / "pocl.icd").write_text(DEBIAN_POCL + "\n")
        env["OCL_ICD_VENDORS"] = str(vendors)
        return env
    why = ("the pocl wheel builds no kernel on this CPU and Debian's PoCL is not installed "
           f"({DEBIAN_POCL}: apt-get install pocl-opencl-icd)")
    if os.environ.get("PYBP_REQUIRE_TOOLS") == "1":
        pytest.fail(f"{why} (PYBP_REQUIRE_TOOLS=1)")
    pytest.skip(why)


def rotated_grid(rotated, *factors):
    """Parameter sets of a kernel's grid sized to the device: on a GPU every combination
    of ``rotated`` and ``factors`` (lists of values or of value tuples); on a CPU every
    combination of ``factors``, each with one value of ``rotated`` in turn, so that every
    value of ``rotated`` still meets every value of each factor (checked here). A cold
    PoCL build is about 2 s a kernel on CI's 2 cores: test_alu.py's full grids were 8 of
    a cold run's 38 minutes. Each set is a flat tuple: ``rotated``'s value first."""
    def flat(value):
        return value if isinstance(value, tuple) else (value,)
    combos = list(itertools.product(*[range(len(f)) for f in factors]))
    if device_is_gpu():
        picked = [(r, c) for r in range(len(rotated)) for c in combos]
    else:
        picked = [(sum(c) % len(rotated), c) for c in combos]
        met = {(r, f, c[f]) for r, c in picked for f in range(len(factors))}
        assert len(met) == len(rotated) * sum(map(len, factors)), "a pair left out"
    return [sum((flat(f[i]) for f, i in zip(factors, c)), flat(rotated[r])) for r, c in picked]


def real_sizes():
    """Detector widths of the exactness cases: where float32 positions go wrong."""
    return (1024, 2048, 4096) if device_is_gpu() else (1024,)


@pytest.fixture(scope="session")
def cl_device():
    return select_device()


@pytest.fixture
def rng(request):
    # Fresh data per test, the same in every run (str hash() is salted per process).
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def assert_verified(got, data, bp, rows=None, filter=None, padding="zero"):
    """Judge a result by the one rule (pybp.parallel.verify) and fail with the verdict."""
    count = 1 if np.ndim(data) == 2 else len(data)
    params = bp.plan.passes[bp.plan.width_for(min(count, bp.slices_per_pass))].params
    verdict = verify.judge(got, data, bp.geometry, params, filter=filter, padding=padding,
                           rows=rows)
    assert verdict.passed, f"{params.key()}: {verdict}"
    return verdict
