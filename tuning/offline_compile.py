#!/usr/bin/env python3
"""Compile pybp's kernels offline for AMD GPUs (Debian's clang-19 with the ROCm device
libraries) and Intel GPUs (ocloc from Debian's intel-opencl-icd), with no such GPU here,
and check their resource use against what the profiler assumes.

    python tuning/offline_compile.py [--set ci|all] [--jobs N] [--markdown FILE]

``ci``: the profiler's pick and every family's default for each setting on each target,
the packing kernels, the FFT filter at 128-8192 points, the convolution filter and the
normalisation of every input type. ``all`` adds the tuner's candidates (pybp.tune.search) on
the AMD and Intel rows of the architecture table. Every source must compile for every
target; for each back-projection kernel pybp's local-memory estimate must equal the
compiler's; and each profiler pick must reach half the occupancy its target allows, or
be listed in ``BELOW_HALF`` with the reason. Prints one row per (source, target), and
with ``--markdown`` writes the table of the profiler's picks for docs/portability.md.

Occupancy: AMD, the compiler's own waves per SIMD (from registers and LDS) over the
architecture's most; Intel, the hardware threads one Xe-core (subslice) keeps busy,
from the work-group's threads (work-items / SIMD width) and SLM, over its threads.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pybp.cl.device import DeviceDescription  # noqa: E402
from pybp.parallel import kernels, profiler  # noqa: E402
from pybp.parallel.params import SETTINGS  # noqa: E402
from pybp.stages import filters, halfscale, normalize  # noqa: E402
from pybp.tune import search as tuning  # noqa: E402

CLANG = os.environ.get("PYBP_CLANG", "clang-19")
DEVICE_LIBS = os.environ.get("PYBP_ROCM_DEVICE_LIBS", "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode")
OCLOC = os.environ.get("PYBP_OCLOC", "ocloc")


@dataclass(frozen=True)
class Target:
    """A GPU to compile for, with the hardware facts occupancy is measured against."""

    name: str
    compiler: str       # "amd" or "intel"
    max_waves: int = 0  # AMD: waves per SIMD
    core_threads: int = 0  # Intel: hardware threads per Xe-core (subslice)
    core_slm: int = 65536  # Intel: SLM per Xe-core (subslice), bytes
    fp64: bool = True
    note: str = ""


TARGETS = (
    Target("gfx906", "amd", max_waves=10, note="Vega 20 (MI50, Radeon VII)"),
    Target("gfx90a", "amd", max_waves=8, note="CDNA2 (MI210, MI250)"),
    Target("gfx1100", "amd", max_waves=16, note="RDNA3 (RX 7900)"),
    Target("acm-g10", "intel", core_threads=16 * 8, fp64=False, note="Arc A770 (Xe-HPG)"),
    Target("tgllp", "intel", core_threads=16 * 7, fp64=False, note="Xe-LP (11th gen Core)"),
)

AMD_LDS = 65536  # bytes of LDS per compute unit (GCN, CDNA) or per work-group (RDNA)
ALL_FORMATS = frozenset((c, s) for c in (1, 2, 4) for s in ("float", "half"))


def description(target: Target) -> DeviceDescription:
    """A device of the target's kind, as the profiler sees it."""
    amd = target.compiler == "amd"
    return DeviceDescription(
        index=0, platform="AMD Accelerated Parallel Processing" if amd else "Intel(R) OpenCL Graphics",
        platform_version="OpenCL 2.1", vendor="Advanced Micro Devices, Inc." if amd else "Intel(R) Corporation",
        name=target.name, version="OpenCL 2.0", driver="offline", type="gpu", compute_units=64,
        clock_mhz=1800, global_memory=16 << 30, max_allocation=4 << 30, local_memory=65536,
        constant_memory=65536, image_support=True, image2d_max_width=16384,
        image2d_max_height=16384, compute_capability=None,
        gfx_target=target.name if amd else None,
        extensions=("cl_khr_fp64",) if target.fp64 else (), max_work_group_size=1024)


@dataclass(frozen=True)
class Source:
    what: str          # a name for the table
    text: str
    params: object = None  # back-projection kernels: their parameter set
    pick: bool = False     # the profiler's choice for its setting on this target


def sources(target: Target, which: str) -> list:
    device = description(target)
    found = {}

    def add(source):
        found.setdefault(source.text, source)

    for slices, interpolation, storage in SETTINGS:
        pick = profiler.kernel_params(device, ALL_FORMATS, slices, interpolation, storage,
                                      tuned={})
        add(Source(pick.key(), kernels.backproject_source(pick), pick, pick=True))
        add(Source("pack " + pick.key(), kernels.pack_source(pick)))
        candidates = [dict(kernel=k) for k in ("alu", "standard", "locality")]
        candidates += [dict(kernel="multiproj", constants=c) for c in ("constant", "local")]
        if which == "all":
            candidates += list(tuning.candidates(interpolation))
        for values in candidates:
            values = dict(values)
            kernel = values.pop("kernel")
            try:
                params = profiler.kernel_params(device, ALL_FORMATS, slices, interpolation,
                                                storage, kernel, tuned={}, **values)
            except ValueError:
                continue  # does not fit this device
            add(Source(params.key(), kernels.backproject_source(params), params))
    for size in (128, 256, 512, 1024, 2048, 4096, 8192):
        items = min(filters.FFT_ITEMS, size // 2)
        for padding in ("zero", "edge"):
            first = filters.edge_padding(size // 2)[0] if padding == "edge" else 0
            paired = 8 * size <= device.local_memory
            add(Source(f"fft {size} {padding}", filters.fft_source(size, items, padding, first, paired)))
    for padding in ("zero", "edge"):
        add(Source(f"convolution {padding}", filters.convolution_source(padding)))
    real = "double" if target.fp64 else "float"
    for raw in sorted(set(normalize.RAW_TYPES.values())):
        add(Source(f"normalise {raw} in {real}", normalize.source(raw, real)))
    add(Source("half scaling", halfscale.source()))
    add(Source("reconstruction circle", kernels.circle_source()))
    return list(found.values())


@dataclass
class Result:
    source: Source
    target: Target
    ok: bool
    message: str = ""
    registers: int = 0   # AMD VGPRs; Intel GRF count
    spills: int = 0      # spilled registers (AMD VGPRs + SGPRs; Intel GRF, ocloc's estimate)
    local: int = -1      # LDS / SLM bytes, -1 unknown
    simd: int = 0        # Intel
    occupancy: float = 0.0  # of the target's most, 0..1 (back-projection kernels)
    waves: int = 0       # AMD waves per SIMD
    limit: str = ""      # what holds occupancy back, where it is under the most
    unroll_ignored: bool = False  # AMD: a `#pragma unroll` the compiler did not apply


# Debian's rocm-device-libs (5.2) predate RDNA3: gfx1100 takes the ISA-version constant
# of gfx1036 (RDNA2), the one target-specific file; the other libraries are generic.
ISA_STAND_INS = {"gfx1100": "gfx1036"}
_LIBS_LOCK = threading.Lock()


def device_libs(target: Target) -> str:
    """The ROCm device-library folder for ``target``, with a stand-in where needed."""
    wanted = f"oclc_isa_version_{target.name[3:]}.bc"
    if (Path(DEVICE_LIBS) / wanted).is_file() or target.name not in ISA_STAND_INS:
        return DEVICE_LIBS
    folder = Path(tempfile.gettempdir()) / f"pybp-device-libs-{os.getpid()}-{target.name}"
    with _LIBS_LOCK:  # compiles run on threads: the first makes the folder, once
        if not (folder / wanted).exists():
            folder.mkdir(exist_ok=True)
            for library in Path(DEVICE_LIBS).glob("*.bc"):
                if not (folder / library.name).exists():
                    (folder / library.name).symlink_to(library)
            stand_in = f"oclc_isa_version_{ISA_STAND_INS[target.name][3:]}.bc"
            (folder / wanted).symlink_to(Path(DEVICE_LIBS) / stand_in)
    return str(folder)


def compile_amd(source: Source, target: Target, folder: Path) -> Result:
    path = folder / "kernel.cl"
    path.write_text(source.text)
    done = subprocess.run([CLANG, "-x", "cl", "-cl-std=CL1.2", "-target", "amdgcn-amd-amdhsa",
                           f"-mcpu={target.name}", f"--rocm-device-lib-path={device_libs(target)}",
                           "-Rpass-analysis=kernel-resource-usage", "-c", str(path), "-o",
                           str(folder / "kernel.o")], capture_output=True, text=True)
    if done.returncode:
        return Result(source, target, False, done.stderr.strip().splitlines()[-1:][0][:200])
    remarks = dict(re.findall(r"remark:\s+([A-Za-z ]+?)(?: \[[^\]]*\])?: (\d+)", done.stderr))
    waves = int(remarks.get("Occupancy", 0))
    result = Result(source, target, True, registers=int(remarks.get("VGPRs", 0)),
                    spills=int(remarks.get("VGPRs Spill", 0)) + int(remarks.get("SGPRs Spill", 0)),
                    local=int(remarks.get("LDS Size", -1)), waves=waves,
                    occupancy=waves / target.max_waves,
                    unroll_ignored="loop not unrolled" in done.stderr)
    if source.params is not None and waves < target.max_waves:
        items = source.params.local_size[0] * source.params.local_size[1]
        wave = 32 if target.name.startswith("gfx1") else 64
        groups = AMD_LDS // result.local if result.local > 0 else 99
        by_lds = groups * -(-items // wave) // 4  # work-groups per CU, 4 SIMDs (2 per RDNA CU)
        result.limit = (f"LDS: {result.local} B per group, {min(groups, 99)} groups per "
                        f"{AMD_LDS >> 10} KB" if by_lds <= waves else
                        f"registers: {result.registers} VGPRs")
    return result


def compile_intel(source: Source, target: Target, folder: Path) -> Result:
    path = folder / "kernel.cl"
    path.write_text(source.text)
    done = subprocess.run([OCLOC, "compile", "-file", str(path), "-device", target.name,
                           "-options", "-cl-std=CL1.2", "--format", "zebin", "-out_dir",
                           str(folder), "-output", "kernel", "-output_no_suffix"],
                          capture_output=True, text=True)
    binary = folder / "kernel"
    if done.returncode or not binary.is_file():
        lines = (done.stdout + done.stderr).strip().splitlines()
        return Result(source, target, False, (lines[-1] if lines else "failed")[:200])
    info = binary.read_bytes()
    info = info[info.find(b"kernels:"):].decode(errors="replace")
    def field(name, default=0):
        match = re.search(rf"{name}:\s+(\d+)", info)
        return int(match.group(1)) if match else default
    simd, slm, grf = field("simd_size"), field("slm_size"), field("grf_count", 128)
    # ocloc says "spilled around N" (registers); this version's zeInfo has no spill field.
    spilled = re.search(r"spilled around (\d+)", done.stdout + done.stderr)
    spill = int(spilled.group(1)) if spilled else 0
    result = Result(source, target, True, registers=grf, spills=spill, local=slm, simd=simd)
    if source.params is not None and simd:
        items = source.params.local_size[0] * source.params.local_size[1]
        threads = -(-items // simd)
        per_eu = 8 if grf <= 128 else 4  # large-GRF mode halves the threads per EU
        core = target.core_threads if per_eu == 8 else target.core_threads // 2
        groups = min(core // threads, target.core_slm // slm if slm else core)
        result.occupancy = min(core, groups * threads) / target.core_threads
        if result.occupancy < 1:
            result.limit = (f"SLM: {slm} B per group, {groups} groups per {target.core_slm >> 10} KB"
                            if slm and target.core_slm // slm < core // threads else
                            f"SIMD{simd}, {grf} GRF: {threads} threads per group")
    return result


def compile_one(source: Source, target: Target) -> Result:
    with tempfile.TemporaryDirectory() as folder:
        compile = compile_amd if target.compiler == "amd" else compile_intel
        return compile(source, target, Path(folder))


# Profiler picks that reach less than half their target's occupancy, and why (reviewed
# by hand: a new entry here is a decision, not a formality).
BELOW_HALF = {
    ("gfx906", "multiproj-v4"): "the 4-slice partial sums (Alg. 3: 4 projections x 256 "
                                "float4, 16 KB) and 4 KB of cached constants leave room for 3 "
                                "groups per CU; the AMD row runs 2 slices per pass unless "
                                "asked (5 waves on gfx906, 5 on gfx90a)",
    ("gfx90a", "multiproj-v4"): "as gfx906: 20 KB of LDS per group",
    ("gfx1100", "multiproj-v4"): "as gfx906: 20 KB of LDS per group",
}


def below_half_reason(result: Result):
    key = result.source.params.key()
    return next((why for (target, prefix), why in BELOW_HALF.items()
                 if target == result.target.name and key.startswith(prefix)), None)


def check(results) -> list:
    """What falls short of the rules in the module docstring, one line each."""
    problems = []
    for r in results:
        if not r.ok:
            problems.append(f"{r.target.name}: {r.source.what} does not compile: {r.message}")
            continue
        params = r.source.params
        if params is None:
            continue
        if r.local >= 0 and r.local != params.local_memory_bytes:
            problems.append(f"{r.target.name}: {r.source.what}: the compiler takes {r.local} bytes "
                            f"of local memory, pybp estimates {params.local_memory_bytes}")
        if r.source.pick and r.occupancy < 0.5 and below_half_reason(r) is None:
            problems.append(f"{r.target.name}: the profiler's {r.source.what} reaches "
                            f"{r.occupancy:.0%} occupancy, under half, with no reason in BELOW_HALF")
    return problems


def row(r: Result) -> str:
    if not r.ok:
        return f"{r.target.name:8s} FAILED  {r.source.what}: {r.message}"
    if r.target.compiler == "amd":
        use = f"{r.registers:3d} VGPRs, {r.waves:2d} waves"
    else:
        use = f"SIMD{r.simd:<2d} {r.registers} GRF"
    occupancy = f"{r.occupancy:4.0%}" if r.source.params is not None else "    "
    limit = f" ({r.limit})" if r.limit else ""
    return (f"{r.target.name:8s} ok {use}, LDS {r.local:6d}, spills {r.spills:4d}, "
            f"occupancy {occupancy}{' pick' if r.source.pick else '     '} {r.source.what}{limit}")


def summary(results) -> str:
    """Per target and family: back-projection kernels at or over half occupancy, and what
    holds the others back (the tuner's candidates, with --set all)."""
    lines = ["| target | family | kernels | at least half | under half: held back by |",
             "| --- | --- | --- | --- | --- |"]
    groups = {}
    for r in results:
        if r.ok and r.source.params is not None:
            groups.setdefault((r.target.name, r.source.params.kernel), []).append(r)
    for (target, family), rs in groups.items():
        under = [r for r in rs if r.occupancy < 0.5]
        causes = {}
        for r in under:
            cause = r.limit.split(":")[0]
            causes[cause] = causes.get(cause, 0) + 1
        spills = sum(r.spills > 0 for r in rs)
        why = ", ".join(f"{cause} ({n})" for cause, n in sorted(causes.items()))
        lines.append(f"| {target} | {family} | {len(rs)} | {len(rs) - len(under)} | {why}"
                     f"{f'; {spills} spill' if spills else ''} |")
    return "\n".join(lines) + "\n"


def markdown(results) -> str:
    """The profiler's picks, one row per target and pass width where the settings'
    (interpolation, storage) picks use the same resources; then :func:`summary`."""
    rows = {}
    for r in results:
        if not (r.ok and r.source.pick):
            continue
        registers = (f"{r.registers} VGPRs" if r.target.compiler == "amd"
                     else f"SIMD{r.simd}, {r.registers} GRF")
        width = "-".join(r.source.what.split("-")[:2])  # family and slices per pass
        why = below_half_reason(r) if r.occupancy < 0.5 else ""
        cells = (r.target.name, width, registers, r.local, r.spills, f"{r.occupancy:.0%}", why or "")
        rows.setdefault(cells, []).append("-".join(r.source.what.split("-")[2:4]))
    lines = ["| target | profiler's pick | settings | registers | local memory (bytes) | spills "
             "| occupancy | why under half |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (target, width, registers, local, spills, occupancy, why), settings in rows.items():
        lines.append(f"| {target} | {width} | {', '.join(settings)} | {registers} | {local} "
                     f"| {spills} | {occupancy} | {why} |")
    return "\n".join(lines) + "\n\n" + summary(results)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=("ci", "all"), default="ci")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--targets", nargs="*", default=[t.name for t in TARGETS])
    parser.add_argument("--markdown", help="write the table of the profiler's picks here")
    args = parser.parse_args(argv)
    for tool in (CLANG, OCLOC):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found: apt-get install clang-19 rocm-device-libs "
                             f"intel-opencl-icd")
    jobs = [(s, t) for t in TARGETS if t.name in args.targets for s in sources(t, args.set)]
    print(f"{len(jobs)} compilations ({len({s.text for s, _ in jobs})} distinct sources)", flush=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda job: compile_one(*job), jobs))
    for r in results:
        print(row(r))
    if args.markdown:
        Path(args.markdown).write_text(markdown(results))
    problems = check(results)
    for problem in problems:
        print("PROBLEM", problem)
    amd = [r for r in results if r.ok and r.target.compiler == "amd"]
    print(f"{sum(r.unroll_ignored for r in amd)} of {len(amd)} AMD compilations left a "
          f"`#pragma unroll` unapplied (loops of a count known only at run time)")
    print(f"{sum(r.ok for r in results)} of {len(results)} compiled; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
