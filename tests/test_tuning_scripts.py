"""Every script kept in tuning/ (tuning/README.md) runs at a tiny size and prints the
table it is kept for, with figures in their range: a script the docs cite cannot rot
unseen. tuning/offline_compile.py is run by tests/test_offline_compile.py,
tuning/startup_time.py by tests/test_startup.py and tuning/module_graph.py by
tests/test_layout.py; each of those is also run here as a user would."""

import os
import re
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
TUNING = ROOT / "tuning"
KEPT = {"accuracy.py", "cone_accuracy.py", "cone_astra.py", "cone_pair.py", "fan_astra.py",
        "limited_angle.py",
        "module_graph.py", "offline_compile.py", "oversample_error.py", "portability.py",
        "slab_parts.py", "startup_time.py", "tune.py", "units_accuracy.py"}


def run(script, *args, cwd=None, env=None, timeout=600):
    done = subprocess.run([sys.executable, str(TUNING / script), *args], cwd=cwd or ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{script} {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def figures(line):
    """The numbers of a table row, after its first cell."""
    return [float(x) for x in re.findall(r"(?<![\w.-])-?\d+\.?\d*(?:e[-+]?\d+)?", line.split("|", 2)[-1])]


def test_tuning_keeps_only_the_listed_tools():
    """tuning/ holds the tools tuning/README.md lists, each tested in this file, and no
    script imports a test or another script."""
    here = {p.name for p in TUNING.iterdir() if p.name != "README.md" and p.name != "__pycache__"}
    assert here == KEPT
    listed = set(re.findall(r"^\| `(\w+\.py)` \|", (TUNING / "README.md").read_text(), re.M))
    assert listed == KEPT
    for name in KEPT:
        source = (TUNING / name).read_text()
        assert "sys.path.insert" not in source or name == "offline_compile.py", name
        assert not re.search(r"^\s*(from|import) (test_|conftest|tuning)", source, re.M), name


def test_accuracy_prints_both_tables_within_the_rules():
    out = run("accuracy.py", "--sizes", "64", "--angles", "8", "--rows", "4", "--half-size", "64")
    rows = [line for line in out.splitlines() if line.startswith("| 64 ")]
    assert rows and "FAILED" not in out
    half = [line for line in out.splitlines() if line.startswith("| FBP (ramp)")
            or line.startswith("| back-projection")]
    assert len(half) == 2 and all(0 < max(figures(line)) < 1e-3 for line in half), half


def test_cone_accuracy_prints_each_family():
    out = run("cone_accuracy.py", "--widths", "48")
    row = next(line for line in out.splitlines() if line.startswith("| 48 "))
    errors = figures(row)
    assert len(errors) == 8 and errors[0] < 1e-5 and max(errors) < 1e-2, row  # exact double


def test_units_accuracy_is_within_the_tests_bounds():
    out = run("units_accuracy.py")
    ours = [line for line in out.splitlines() if "| pybp |" in line]
    assert len(ours) == 6
    for line in ours:
        cells = [c.strip() for c in line.split("|")]
        d_rms, d_max = float(cells[4]), float(cells[5])
        assert d_rms < 2e-2 and d_max < 5e-2, line


def test_limited_angle_prints_every_method():
    out = run("limited_angle.py", "--size", "16", "--most", "2")
    names = ("FBP", "SIRT, nonnegative", "SIRT, plain", "SART, nonnegative, 10", "one angle",
             "CGLS:", "CGLS in the circle", "TV")
    for name in names:
        line = next(line for line in out.splitlines() if name in line)
        assert all(0 < e < 1.5 for e in figures(line)[-1:]), line


def test_oversample_error_is_the_documented_size():
    out = run("oversample_error.py", "63")
    oversample, nearest = figures(next(line for line in out.splitlines() if line.startswith("| 63 ")))
    assert 0.01 < oversample < 0.2 and oversample < nearest


def test_fan_astra_runs_pybps_half(tmp_path):
    out = run("fan_astra.py", "pybp", "--size", "32", "--folder", str(tmp_path))
    middle = float(re.search(r"disc middle ([\d.]+)", out).group(1))
    assert abs(middle - 0.02) < 0.002, out
    assert (tmp_path / "fan_rec.npy").exists() and (tmp_path / "fan_sirt.npy").exists()


def test_cone_astra_runs_pybps_half():
    """Issue 69's four cases at 16^3: each case's pair and SIRT iteration timed."""
    out = run("cone_astra.py", "pybp", "--size", "16")
    cases = out.split("== ")[1:]
    assert [case.splitlines()[0] for case in cases] == [
        "cone, pitch 2.67", "cone, pitch 1", "cone, pitch 0.5", "laminography"], out
    for case in cases:
        for row in ("forward A", "transpose A^T", "SIRT iteration", "CGLS iteration"):
            line = next(line for line in case.splitlines() if line.startswith(f"| {row}"))
            assert figures(line)[0] > 0, line


def test_cone_pair_times_each_case_with_its_bits():
    """The pair alone on issue 69's four cases at 16^3, each with its CRCs; a constant
    set by --set reaches the pair (the gather's bits do not depend on its groups' size:
    the same CRC with 32 work-items a group), and a name that is not one is refused."""
    out = run("cone_pair.py", "--size", "16", "--repeats", "1")
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [row.split("|")[1].strip() for row in rows] == [
        "standard", "pitch-1", "pitch-0.5", "laminography"], out
    crcs = {}
    for row in rows:
        cells = [cell.strip() for cell in row.split("|")[1:-1]]
        assert cells[1] in ("gather", "scatter")
        assert float(cells[2].split()[0]) > 0 and float(cells[3].split()[0]) > 0, row
        assert re.fullmatch(r"[0-9a-f]{8}", cells[4]) and re.fullmatch(r"[0-9a-f]{8}", cells[5])
        crcs[cells[0]] = cells[4]
    assert "gather" in [row.split("|")[2].strip() for row in rows if "pitch-1" in row]
    out = run("cone_pair.py", "--size", "16", "--repeats", "1", "--cases", "pitch-1",
              "--only", "A", "--set", "GATHER_ITEMS=32")
    assert "settings: GATHER_ITEMS=32" in out
    row = next(line for line in out.splitlines() if line.startswith("| pitch-1"))
    assert row.split("|")[5].strip() == crcs["pitch-1"] and row.split("|")[4].strip() == "-"
    refused = subprocess.run([sys.executable, str(TUNING / "cone_pair.py"), "--set", "NOPE=1"],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "a constant of pybp.cone.project" in refused.stderr


def test_slab_parts_splits_a_quarter_limit_into_its_phases():
    out = run("slab_parts.py", "128", "16", "64", "96")
    assert "same bits: True" in out, out
    slabs = re.search(r"quarter: slabs (\d+)", out)
    assert slabs and int(slabs.group(1)) > 1, out
    for phase in ("fill alone", "slabs from the store", "uploads alone", "passes",
                  "a kernel enqueued"):
        assert phase in out, out


def test_module_graph_draws_the_packages():
    out = run("module_graph.py")
    assert out.startswith("no circles, no private names across modules"), out[:300]
    assert "flowchart TD" in out and "registry --> parallel" in out


def test_tune_searches_and_keeps_its_profile_apart(tmp_path):
    """At a tiny budget, into a cache of its own (never the user's profile)."""
    env = dict(os.environ, PYBP_CACHE_DIR=str(tmp_path))
    out = run("tune.py", "--budget", "3", "--size", "32", "--slices", "1", "--interpolation",
              "linear", "--storage", "float", "--quiet", env=env)
    assert re.search(r"\d+ of \d+ candidates tried", out), out
    assert any(p.name.startswith("profile-") for p in tmp_path.iterdir()) or "stay" in out


def test_portability_tables_the_test_device():
    device = os.environ.get("PYBP_DEVICE", "")
    out = run("portability.py", "--size", "32", "--repeats", "1", "--no-interrupt",
              "--setting", "1-linear-float", "--setting", "4-nearest-half",
              f"test device={device}", "nowhere=no such device")
    alu = next(line for line in out.splitlines() if line.startswith("| test device | alu |"))
    passed, checks = map(int, re.search(r"\| (\d+)/(\d+) \|", alu).groups())
    assert passed == checks > 0, alu
    assert "**nowhere**: not usable here" in out


def test_startup_time_and_offline_compile_answer_help():
    """Both are run in full by their tests; here, as a user starts them."""
    for script in ("startup_time.py", "offline_compile.py"):
        assert "usage" in run(script, "--help").lower()
