"""Every kernel family once at a tiny size under Oclgrind (a simulator that checks
kernels), registered for these runs only through a folder of its own in
``OCL_ICD_VENDORS``, never system-wide (a registered Oclgrind says it is a GPU).

Two runs of ``tests/oclgrind_cases.py``: with images, under the data-race and API
checks; with every sinogram in a buffer, under those and the uninitialised-value check
(which takes image reads of defined data for undefined: docs/portability.md). Every
result must pass the one rule, and Oclgrind must say nothing.

Oclgrind comes from Debian's package ``oclgrind`` (``PYBP_OCLGRIND`` names another
``liboclgrind-rt-icd.so``). Without it the tests skip, unless ``PYBP_REQUIRE_TOOLS=1``
(CI), where a missing tool fails them.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

LIBRARY = Path(os.environ.get("PYBP_OCLGRIND", "/usr/lib/oclgrind/liboclgrind-rt-icd.so"))
CASES = Path(__file__).with_name("oclgrind_cases.py")
# What Oclgrind prints when it finds something (its plugins and its API check).
DIAGNOSTIC = re.compile(r"Oclgrind - |Data race|Uninitialized value|Controlflow depends|"
                        r"Invalid (read|write)|OCLGRIND FATAL|Unsupported instruction")
# Oclgrind 21.10's uninitialised-value checker reports the first convolution-filter
# launch of a process, whose rows the upload wrote (the same kernel on new data later in
# the process, and the FFT filter on the same rows, are clean): that case runs twice and
# its first run is held to the other checks only.
FIRST_LAUNCH_ARTEFACT = "CASE filter-convolution-zero-4"


def oclgrind_available():
    if LIBRARY.is_file():
        return True
    if os.environ.get("PYBP_REQUIRE_TOOLS") == "1":
        pytest.fail(f"Oclgrind not found at {LIBRARY} (PYBP_REQUIRE_TOOLS=1)")
    pytest.skip(f"Oclgrind not installed ({LIBRARY}): apt-get install oclgrind")


def run_cases(tmp_path, mode, checks):
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    (vendors / "oclgrind.icd").write_text(f"{LIBRARY}\n")
    env = dict(os.environ, OCL_ICD_VENDORS=str(vendors), PYBP_CACHE_DIR=str(tmp_path / "cache"),
               PYBP_DEVICE="oclgrind",
               # pyopencl's build cache asks the device for NVIDIA's attributes, which
               # Oclgrind's API check reports: build from source every time instead.
               PYOPENCL_NO_CACHE="1", **{f"OCLGRIND_{check}": "1" for check in checks})
    done = subprocess.run([sys.executable, str(CASES), mode], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, done.stderr


def diagnostics(stderr, skip_uninitialised_in=None):
    """``(case, line)`` of each diagnostic, by the case it came in."""
    found, case, lines = [], "before any case", stderr.splitlines()
    for number, line in enumerate(lines):
        if line.startswith("CASE "):
            case = line
        elif DIAGNOSTIC.search(line):
            following = " ".join(lines[number:number + 3])
            if case == skip_uninitialised_in and re.search(r"[Uu]ninitiali[sz]ed", following):
                continue
            found.append((case, line.strip()))
    return found


def check_results(stdout):
    results = [line.split() for line in stdout.splitlines() if line.startswith("RESULT")]
    assert len(results) >= 14
    for result in results:
        text = " ".join(result)
        if "FAILED" in text:
            pytest.fail(text)
        if result[1].startswith("filter-") or result[1].startswith("reconstruct"):
            assert float(result[2]) < 1e-3, text   # float32 against float64 (half: 2e-4)
        if result[1].startswith("pair-"):  # A and A^T against float64
            assert float(result[2]) < 2e-6 and float(result[3]) < 2e-6, text
        if result[2] == "oversample-fbp":
            assert float(result[3]) < 0.1, text    # 31 bins: quarter-bin steps are coarse


def test_every_kernel_family_on_images_and_buffers_has_no_race_or_api_error(tmp_path):
    oclgrind_available()
    stdout, stderr = run_cases(tmp_path, "images", ("DATA_RACES", "CHECK_API"))
    check_results(stdout)
    assert diagnostics(stderr) == []


def test_every_kernel_family_on_buffers_reads_nothing_undefined(tmp_path):
    oclgrind_available()
    stdout, stderr = run_cases(tmp_path, "buffers", ("DATA_RACES", "CHECK_API", "UNINITIALIZED"))
    check_results(stdout)
    assert diagnostics(stderr, FIRST_LAUNCH_ARTEFACT) == []
    assert stdout.count("RESULT filter-convolution-zero") == 2


def test_the_checks_would_see_a_race(tmp_path):
    """The same run, with a kernel that races, reports it: the checks are on."""
    oclgrind_available()
    racy = tmp_path / "racy.py"
    racy.write_text(
        "import numpy as np, pyopencl as cl\n"
        "d = cl.get_platforms()[0].get_devices()[0]; c = cl.Context([d]); q = cl.CommandQueue(c)\n"
        "p = cl.Program(c, '__kernel void k(__global int *a) { a[0] = get_local_id(0); }').build()\n"
        "b = cl.Buffer(c, cl.mem_flags.READ_WRITE, 4)\n"
        "p.k(q, (8,), (8,), b); q.finish()\n")
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    (vendors / "oclgrind.icd").write_text(f"{LIBRARY}\n")
    env = dict(os.environ, OCL_ICD_VENDORS=str(vendors), OCLGRIND_DATA_RACES="1",
               PYOPENCL_NO_CACHE="1")
    done = subprocess.run([sys.executable, str(racy)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert "Write-write data race" in done.stderr
