"""Running on every OpenCL implementation: devices that cannot build are skipped with
one warning, parameter sets are checked on their first use on a device (and give way
where wrong), timers that lie give way to the wall clock, queues are flushed before
they are polled, work-group sizes are checked, and the CPU runtime pip installed is
found. End to end: a CPU that PoCL 3.0's LLVM 14 does not know (AMD Zen 5, emulated by
answering CPUID as one) still runs the README's demo, on Intel's runtime."""

import dataclasses
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pytest

import pybp
from pybp.cli import commands as cli
from pybp.cl import codegen, device, implementations, pacing, profiles
from pybp.parallel import kernels, prepare as runner
from pybp.parallel import verify
from pybp.parallel.params import AluParams


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYBP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


# ---- probing and choosing --------------------------------------------------------------
def test_probe_builds_runs_and_keeps_its_verdict(cl_device, cache, monkeypatch):
    monkeypatch.setattr(device, "_PROBES", {})
    verdict = device.probe(cl_device)
    assert verdict.usable and verdict.why == ""
    record = profiles.read_record(device.named(cl_device), "probe")["probe"]
    assert record["usable"] and record["version"] == device.PROBE_VERSION
    # Next time (another process) from the record: no kernel is built.
    monkeypatch.setattr(device, "_PROBES", {})
    monkeypatch.setattr(device, "_run_probe", lambda d: pytest.fail("probed again"))
    assert device.probe(cl_device) == verdict


def test_a_device_that_cannot_build_reports_the_compilers_line(cl_device, monkeypatch):
    def broken_build(self, *args, **kwargs):
        raise cl.RuntimeError("clBuildProgram failed: BUILD_PROGRAM_FAILURE\n\n"
                              "Build on <pyopencl.Device>:\n\nerror: unknown target CPU "
                              "'generic'\nnote: valid target CPU values are: ...")
    monkeypatch.setattr(cl.Program, "build", broken_build)
    monkeypatch.setattr(codegen, "_cached", lambda *args: broken_build(None))
    verdict = device._run_probe(cl_device)
    assert not verdict.usable
    assert verdict.why == "cannot build kernels (error: unknown target CPU 'generic')"


class FakeDevice:
    """Enough of a pyopencl.Device for choosing (not for running)."""

    def __init__(self, pointer, name, platform, kind=cl.device_type.CPU, units=2):
        self.int_ptr, self.name, self.type = pointer, name, kind
        self.platform = SimpleNamespace(name=platform, version=f"{platform} 1.0")
        self.max_compute_units, self.max_clock_frequency = units, 2000


def fake_machine(monkeypatch, *devices, broken=()):
    monkeypatch.setattr(device, "all_devices", lambda: list(devices))
    verdicts = {d.int_ptr: device.Probe(False, "cannot build kernels (error: unknown target CPU "
                                                "'generic')", fresh=True) if d.name in broken
                else device.Probe(True) for d in devices}
    monkeypatch.setattr(device, "probe", lambda d: verdicts[d.int_ptr])
    monkeypatch.setattr(device, "_WARNED", set())  # each fake machine's skips told anew
    monkeypatch.delenv("PYBP_DEVICE", raising=False)


POCL = FakeDevice(1, "pthread-AMD EPYC 9575F", "Portable Computing Language")
INTEL = FakeDevice(2, "AMD EPYC 9575F", "Intel(R) OpenCL")
OCLGRIND = FakeDevice(3, "Oclgrind Simulator", "Oclgrind", kind=cl.device_type.ALL)


def test_the_default_skips_a_device_that_cannot_build_with_one_warning(monkeypatch):
    fake_machine(monkeypatch, POCL, INTEL, OCLGRIND, broken=("pthread-AMD EPYC 9575F",))
    with pytest.warns(RuntimeWarning) as caught:
        chosen = device.select_device()
    assert chosen is INTEL  # not Oclgrind, which says it is a GPU
    assert len(caught) == 1
    assert str(caught[0].message) == ("pybp: skipping [0] pthread-AMD EPYC 9575F (Portable "
                                      "Computing Language 1.0): cannot build kernels (error: "
                                      "unknown target CPU 'generic')")


def test_pocl_goes_first_where_both_cpu_runtimes_work(monkeypatch):
    fake_machine(monkeypatch, INTEL, POCL)
    assert device.select_device() is POCL
    assert device.device_type_name(OCLGRIND) == "simulator"


def test_a_chosen_device_that_cannot_build_is_one_clear_error(monkeypatch):
    fake_machine(monkeypatch, POCL, INTEL, broken=("pthread-AMD EPYC 9575F",))
    with pytest.raises(RuntimeError, match=r"^device: \[0\] pthread-AMD EPYC 9575F .*cannot "
                                           r"build kernels .*'generic'.*pybp devices"):
        device.select_device(0)
    monkeypatch.setenv("PYBP_DEVICE", "pthread")
    with pytest.raises(RuntimeError, match="^PYBP_DEVICE: "):
        device.select_device()


def test_no_usable_device_says_why_each_failed_and_the_remedy(monkeypatch):
    fake_machine(monkeypatch, POCL, broken=("pthread-AMD EPYC 9575F",))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError) as caught:
            device.select_device()
    message = str(caught.value)
    assert message.startswith("no usable OpenCL device: [0] pthread-AMD EPYC 9575F")
    assert "unknown target CPU 'generic'" in message and "pybp's cpu extra" in message


def test_all_devices_leaves_out_those_that_cannot_build(monkeypatch):
    from pybp.cl.device import device_list
    fake_machine(monkeypatch, POCL, INTEL, broken=("pthread-AMD EPYC 9575F",))
    with pytest.warns(RuntimeWarning, match="skipping"):
        assert device_list("all") == [INTEL]
    fake_machine(monkeypatch, POCL, INTEL)  # two runtimes of one CPU: one pipeline
    assert device_list("all") == [POCL]
    gpus = [FakeDevice(4 + i, f"GPU {i}", "NVIDIA CUDA", kind=cl.device_type.GPU) for i in range(2)]
    fake_machine(monkeypatch, POCL, *gpus)
    assert device_list("all") == gpus


def test_the_cli_reports_a_device_that_cannot_build_in_one_line(monkeypatch, tmp_path, capsys):
    fake_machine(monkeypatch, POCL, broken=("pthread-AMD EPYC 9575F",))
    code = cli.main(["demo", "--device", "0", "--output", str(tmp_path / "d.png")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "cannot build kernels" in err[0]
    assert not (tmp_path / "d.png").exists()


# ---- the CPU runtime pip installs ------------------------------------------------------
def test_the_pip_installed_intel_runtime_is_registered_beside_the_systems(tmp_path,
                                                                          monkeypatch):
    prefix = tmp_path / "venv"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "lib" / implementations.INTEL_CPU_LIBRARY).write_bytes(b"")
    system = tmp_path / "etc-vendors"
    system.mkdir()
    (system / "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    monkeypatch.setattr(implementations, "SYSTEM_VENDORS", system)
    monkeypatch.delenv("OCL_ICD_VENDORS", raising=False)
    folder = implementations.register_pip_runtimes(tmp_path / "icd", prefix)
    assert os.environ["OCL_ICD_VENDORS"] == str(folder)
    assert (folder / "nvidia.icd").read_text() == "libnvidia-opencl.so.1\n"
    assert (folder / "pybp-intel-cpu.icd").read_text().strip() == str(
        prefix / "lib" / implementations.INTEL_CPU_LIBRARY)
    # A variable the user set stands; no runtime, nothing done.
    assert implementations.register_pip_runtimes(tmp_path / "icd", prefix) is None
    monkeypatch.delenv("OCL_ICD_VENDORS")
    assert implementations.register_pip_runtimes(tmp_path / "icd", tmp_path) is None
    assert "OCL_ICD_VENDORS" not in os.environ


# ---- the first use of a parameter set on a device -------------------------------------
def small(cl_device, **options):
    angles = np.linspace(0, np.pi, 40, endpoint=False)
    return pybp.Backprojector(48, angles, device=cl_device, **options)


def test_a_parameter_set_is_checked_once_per_device(cl_device, cache, monkeypatch):
    calls = []
    real = runner.check
    monkeypatch.setattr(runner, "check", lambda *a, **k: calls.append(a) or real(*a, **k))
    bp = small(cl_device, kernel="alu", slices_per_pass=1)
    assert len(calls) == 1 and calls[0][0]["verify"] is False
    entries = profiles.read_record(bp.device, "verified")
    assert [key.startswith(bp.params.key()) for key in entries] == [True]
    assert next(iter(entries.values()))["passed"]
    small(cl_device, kernel="alu", slices_per_pass=1)
    assert len(calls) == 1  # known now


def wrong_for(family):
    """A runner.check that finds ``family`` wrong (as Intel's runtime found the ALU
    kernel before the kernels stopped negating per-item values)."""
    real = runner.check

    def check(options, case=verify.CHECK):
        verdict, bp = real(options, case)
        if bp.params.kernel == family:
            verdict = verify.Verdict(verdict.rule, 1.21)
        return verdict, bp
    return check


def test_a_chosen_kernel_that_is_wrong_gives_way_with_one_warning(cl_device, cache, rng,
                                                                  monkeypatch):
    monkeypatch.setattr(runner, "check", wrong_for("alu"))
    with pytest.warns(RuntimeWarning, match=r"the alu-v1-\S+ kernel gives wrong results on .*"
                                            r"exact 1\.21e\+00.*; using multiproj-v1-"):
        bp = small(cl_device, slices_per_pass=1, interpolation="linear")
    assert bp.params.kernel == "multiproj"
    data = rng.standard_normal((40, 48)).astype(np.float32)
    assert verify.judge(bp(data), data, bp.geometry, bp.params).passed


def test_a_forced_kernel_that_is_wrong_is_an_error(cl_device, cache, monkeypatch):
    monkeypatch.setattr(runner, "check", wrong_for("alu"))
    with pytest.raises(RuntimeError, match=r"the alu-v1-\S+ kernel gives wrong results"):
        small(cl_device, kernel="alu", slices_per_pass=1)


def test_verification_can_be_turned_off_for_benchmarks(cl_device, cache, monkeypatch):
    monkeypatch.setattr(runner, "check", lambda *a, **k: pytest.fail("checked"))
    small(cl_device, kernel="alu", verify=False)


# ---- timers, flushes and work-group sizes ----------------------------------------------
def test_where_timers_lie_the_wall_clock_times_the_kernels(cl_device, cache, rng, monkeypatch):
    """rusticl's timestamps say 1 ns per kernel: the probe finds them out, and the
    executor then times its stages by the wall clock."""
    lying = device.Probe(True, timers=False)
    monkeypatch.setattr(device, "probe", lambda d: lying)
    bp = small(cl_device, kernel="alu", slices_per_pass=1)
    assert not bp.device.timers and not bp.executor.pacer.timers
    data = rng.standard_normal((4, 40, 48)).astype(np.float32)
    start = time.perf_counter()
    bp(data)
    wall = time.perf_counter() - start
    assert 0 < bp.last_kernel_seconds <= wall
    assert bp.executor.pacer.rates["backproject"] > 0


def test_the_pacer_times_launches_by_the_wall_clock_where_told():
    pacer = pacing.Pacer("cpu", timers=False)
    done = SimpleNamespace(command_execution_status=0)  # profile would raise: not read
    pacer.launched(done, "backproject", 1000)
    time.sleep(0.01)
    pacer._retire()
    assert 1000 / 1.0 < pacer.rates["backproject"] < 1000 / 0.009


def test_waiting_flushes_the_events_queue_first():
    """rusticl and Oclgrind start enqueued work only on a flush; a poll alone hangs."""
    flushed = []
    queue = SimpleNamespace(flush=lambda: flushed.append(True))
    event = SimpleNamespace(command_queue=queue, command_execution_status=0, wait=lambda: None)
    pacing.wait(event)
    assert flushed == [True]


def test_a_kernel_needing_more_work_items_than_allowed_is_one_clear_error(cl_device):
    context = cl.Context([cl_device])
    small_device = dataclasses.replace(device.describe(cl_device), max_work_group_size=128)
    program = codegen.build(context, kernels.backproject_source(AluParams(items=256)), small_device)
    with pytest.raises(codegen.BuildError, match=r"kernel backproject needs work-groups of 256 "
                                                 r"work-items; the device runs it with at most 128"):
        codegen.kernel(program, "backproject", small_device)


def test_a_build_failure_is_one_line_naming_the_device_and_kernel(cl_device):
    context = cl.Context([cl_device])
    broken = "/* pybp FBP filter by FFT: 64 points */\n__kernel void filter_rows() { nope; }"
    with pytest.raises(codegen.BuildError) as caught:
        codegen.build(context, broken, device.describe(cl_device))
    message = str(caught.value)
    assert "\n" not in message
    assert "the OpenCL compiler failed on the pybp FBP filter by FFT kernel" in message
    assert "nope" in message


# ---- a CPU that PoCL 3.0 does not know, end to end -------------------------------------
SHIM = Path(__file__).with_name("zen5_cpuid.c")


def zen5_shim(tmp_path):
    """An LD_PRELOAD library that answers CPUID as an AMD family 1Ah (Zen 5) part, by
    CPUID faulting (Linux's ARCH_SET_CPUID, on CPUs that support it)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the CPUID shim")
    library = tmp_path / "zen5.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(library), str(SHIM), "-ldl"],
                   check=True)
    probe = subprocess.run([sys.executable, "-c", "pass"],
                           env=dict(os.environ, LD_PRELOAD=str(library)))
    if probe.returncode == 97:
        pytest.skip("this CPU or kernel has no CPUID faulting to emulate another CPU with")
    assert probe.returncode == 0
    return library


def pocl_wheel_knows_this_cpu():
    wheel = [d for d in device.all_devices() if "3.0-rc2" in d.platform.version]
    return not wheel or device.probe(wheel[0]).usable


def test_the_demo_runs_where_pocls_llvm_does_not_know_the_cpu(tmp_path):
    """On a Zen 5 the PoCL wheel fails natively; elsewhere CPUID says Zen 5."""
    if not implementations.pip_runtimes():
        pytest.skip("Intel's CPU runtime is not installed here (the cpu extra brings it)")
    env = dict(os.environ, PYBP_CACHE_DIR=str(tmp_path / "cache"))
    if pocl_wheel_knows_this_cpu():
        env["LD_PRELOAD"] = str(zen5_shim(tmp_path))
    env.pop("PYBP_DEVICE", None)
    env.pop("OCL_ICD_VENDORS", None)
    done = subprocess.run([sys.executable, "-m", "pybp", "demo", "--size", "128", "--output",
                           str(tmp_path / "demo.png")], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert "(Intel(R) OpenCL)" in done.stdout
    assert "RMS 0.0297" in done.stdout
    # PoCL's build failed, once, in one line, and pybp went on.
    skipped = [line for line in done.stderr.splitlines() if "skipping" in line]
    assert len(skipped) == 1 and "unknown target CPU 'generic'" in skipped[0]


def test_cpu_runtimes_are_chosen_by_pybps_own_speed_here(tmp_path, monkeypatch):
    """Where two CPU runtimes work and no device is named, each is timed once on pybp's
    own back-projection (kept with its probe), and the faster is the default: no fixed
    order (PoCL went first, where Intel's runtime ran pybp demo at 0.86 against 0.50)."""
    from pybp.parallel import speed

    monkeypatch.setenv("PYBP_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PYBP_DEVICE", raising=False)
    monkeypatch.setattr(device, "_PROBES", {})
    cpus = [d for d in device.usable_devices(warn=False) if device.device_type_name(d) == "cpu"]
    if len(cpus) < 2 or len(cpus) < len(device.usable_devices(warn=False)):
        pytest.skip("one CPU runtime here, or a GPU: nothing to choose among")
    speed.choose_cpu_runtime()
    speeds = {d.int_ptr: device.probe(d).speed for d in cpus}
    assert all(s > 0 for s in speeds.values()), speeds
    assert speeds[device.select_device().int_ptr] == max(speeds.values())
    monkeypatch.setattr(device, "_PROBES", {})  # another process: from the records
    monkeypatch.setattr(speed, "timed", lambda d: pytest.fail("timed again"))
    speed.choose_cpu_runtime()
    assert speeds[device.select_device().int_ptr] == max(speeds.values())
