"""Every kernel pybp renders for AMD and Intel GPUs compiles offline (clang-19 with the
ROCm device libraries; Intel's ocloc), pybp's local-memory estimate equals the
compilers', and the profiler's picks reach half their target's occupancy or say why
(tuning/offline_compile.py). Needs Debian's clang-19, rocm-device-libs and
intel-opencl-icd: skipped without them, except under ``PYBP_REQUIRE_TOOLS=1`` (CI)."""

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tuning" / "offline_compile.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("offline_compile", TOOL)
    tool = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = tool  # its dataclasses look their module up
    spec.loader.exec_module(tool)
    missing = [t for t in (tool.CLANG, tool.OCLOC) if shutil.which(t) is None]
    if not Path(tool.DEVICE_LIBS).is_dir():
        missing.append(tool.DEVICE_LIBS)
    if missing:
        if os.environ.get("PYBP_REQUIRE_TOOLS") == "1":
            pytest.fail(f"missing {', '.join(missing)} (PYBP_REQUIRE_TOOLS=1)")
        pytest.skip(f"missing {', '.join(missing)}: apt-get install clang-19 rocm-device-libs "
                    f"intel-opencl-icd")
    return tool


def test_every_kernel_compiles_for_amd_and_intel_gpus_as_the_profiler_assumes(capsys):
    tool = load_tool()
    code = tool.main(["--set", "ci"])
    out = capsys.readouterr().out
    assert code == 0, "\n".join(line for line in out.splitlines() if "PROBLEM" in line)
    compiled = [line for line in out.splitlines() if line.split()[1:2] == ["ok"]]
    families = {line.split(" pick ")[1].split("-")[0] for line in compiled if " pick " in line}
    assert families == {"multiproj", "locality"}  # the AMD and Intel rows' picks
    for target in tool.TARGETS:
        rows = [line for line in compiled if line.startswith(target.name)]
        assert any("alu-v4" in line for line in rows) and any("fft 8192" in line for line in rows)


def test_the_checks_catch_a_wrong_local_memory_estimate():
    tool = load_tool()
    source = next(s for s in tool.sources(tool.TARGETS[1], "ci") if s.pick)
    result = tool.compile_one(source, tool.TARGETS[1])
    assert result.ok and result.local == source.params.local_memory_bytes
    result.local += 16
    assert any("pybp estimates" in problem for problem in tool.check([result]))
