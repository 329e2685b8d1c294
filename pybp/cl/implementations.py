"""OpenCL implementations (the software behind a platform) as pybp knows them, as data:
which one is a simulator, which CPU runtime goes first where several work, and the CPU
runtime that pip installs but pyopencl's ICD loader does not look for.

Measured on one machine (2 cores, docs/portability.md): where both build kernels, PoCL
runs the ALU kernels faster than Intel's CPU runtime (1.40 against 0.93 GU/s for one
slice, 5.92 against 4.57 at best), so it goes first; Intel's
runtime is the one on the package index that builds on CPUs PoCL 3.0's LLVM 14 does not
know (AMD Zen 5: "unknown target CPU 'generic'"). Oclgrind says it is a GPU (every
device type bit set) but interprets kernels: it is only ever used when asked for.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

ENV_VENDORS = "OCL_ICD_VENDORS"  # where the ICD loader reads its .icd files
SYSTEM_VENDORS = Path("/etc/OpenCL/vendors")


@dataclass(frozen=True)
class Implementation:
    """One OpenCL implementation. ``rank`` orders devices of one type (lower first)."""

    name: str
    platform: str = ""      # substring of the platform name, lower case; "" matches any
    simulator: bool = False  # interprets kernels: slow, never chosen by default
    rank: int = 5
    # Whether CL_KERNEL_WORK_GROUP_SIZE is a kernel's real limit (checked after a build).
    kernel_limits: bool = True
    # Whether commands may be enqueued from several threads at once (pybp.stream.pipeline).
    threads: bool = True
    build_options: tuple = ()  # given to every build of pybp's kernels (pybp.cl.codegen)
    # Whether built programs are kept as binaries (pybp's cache of them, pybp.cl.codegen).
    binaries: bool = True
    # Whether a binary costs a compile of its own, so that it is kept only from a
    # program's second build, by a later process (pybp.cl.codegen._cached).
    binary_on_reuse: bool = False


# First match wins; keep the catch-all last.
IMPLEMENTATIONS = (
    # Oclgrind 21.10's uninitialised-value checker crashed (SIGSEGV) when the reader
    # thread's upload ran beside the compute thread's kernels: one thread there. It also
    # stops a kernel at LLVM's `freeze` ("Unsupported instruction"), which the
    # optimiser brings in for a division and remainder of one value: unoptimised builds.
    # Its API checker reports the program-binary calls of a binary cache as errors.
    Implementation("Oclgrind", "oclgrind", simulator=True, threads=False,
                   build_options=("-cl-opt-disable",), binaries=False),
    # PoCL makes a binary by compiling each kernel of the program once more, for any
    # work-group size (up to 1.2 s a program on 2 cores; 6.2 s of a first Backprojector's
    # 12.2 s, first_builds.py@82c47bc) to save 19 ms on each later build: not for a kernel
    # built once, as a tuning candidate or one of the tests' variants.
    Implementation("PoCL", "portable computing language", rank=1, binary_on_reuse=True),
    Implementation("Intel CPU runtime", "intel(r) opencl", rank=2),
    # Mesa 22.3: every kernel's CL_KERNEL_WORK_GROUP_SIZE reads 32 (its SIMD width),
    # reqd_work_group_size(256) kernels included, which then run at 256 as asked. (Its
    # profiling timestamps, about 1 ns a kernel, are found out by pybp.cl.device.probe.)
    Implementation("rusticl", "rusticl", rank=3, kernel_limits=False),
    Implementation("other", ""),
)


def identify(platform_name: str) -> Implementation:
    name = platform_name.lower()
    return next(i for i in IMPLEMENTATIONS if i.platform in name)


def named(name: str) -> Implementation:
    """The implementation called ``name`` (``DeviceDescription.implementation``)."""
    return next((i for i in IMPLEMENTATIONS if i.name == name), IMPLEMENTATIONS[-1])


# What `pip install intel-opencl-rt` puts in the environment: the library, whose .icd
# file there still names the conda build's placeholder prefix (pip runs no post-link
# script) and lies where pyopencl's loader does not look.
INTEL_CPU_LIBRARY = "libintelocl.so"


def pip_runtimes(prefix=None) -> dict:
    """``{icd file name: library path}`` of CPU runtimes pip installed under ``prefix``
    (default: this environment)."""
    library = Path(prefix or sys.prefix) / "lib" / INTEL_CPU_LIBRARY
    return {"pybp-intel-cpu.icd": str(library)} if library.is_file() else {}


def register_pip_runtimes(folder: Path, prefix=None) -> Path | None:
    """Point pyopencl's ICD loader at the system's implementations and at the CPU
    runtimes pip installed here, through ``OCL_ICD_VENDORS`` = ``folder`` (rewritten to
    match on every call). Does nothing where the variable is already set (the user's
    choice stands) or pip installed no runtime. Must run before the loader's first
    look (the first OpenCL call of the process). Returns the folder, or None."""
    if os.environ.get(ENV_VENDORS) is not None:
        return None
    runtimes = pip_runtimes(prefix)
    if not runtimes:
        return None
    wanted = {}
    if SYSTEM_VENDORS.is_dir():
        for icd in sorted(SYSTEM_VENDORS.glob("*.icd")):
            try:
                wanted[icd.name] = icd.read_text()
            except OSError:
                continue
    wanted.update({name: library + "\n" for name, library in runtimes.items()})
    folder = Path(folder) / hashlib.sha1(str(Path(prefix or sys.prefix)).encode()).hexdigest()[:12]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for stale in set(p.name for p in folder.glob("*.icd")) - set(wanted):
            (folder / stale).unlink(missing_ok=True)
        for name, text in wanted.items():
            path = folder / name
            if not path.is_file() or path.read_text() != text:
                tmp = folder / f".{name}.{os.getpid()}.tmp"
                tmp.write_text(text)
                os.replace(tmp, path)
    except OSError:
        return None  # an unwritable cache: the runtime stays unseen, as before
    os.environ[ENV_VENDORS] = str(folder)
    return folder
