#!/usr/bin/env python3
"""Issue 36's hostile findings, re-run as the issue wrote them, on this checkout and
(with ``--before``) on an older one beside it: one row per finding, what each checkout
did.

    python tuning/findings.py --before OLD [--only 1,4] [--work DIR] > findings.md

OLD is a folder holding an older ``pybp/`` and ``templates/`` (for example
``git archive 30291f2 pybp templates | tar -x -C OLD``, then
``ln -s ../templates OLD/pybp/templates``, as a wheel lays them out). Each case runs in a fresh
Python process with ``PYTHONPATH`` set to the checkout, in a folder of its own under
WORK; the inputs (demo scans made by this checkout) are shared. A row reads
"exit CODE: the last line on standard error" for a command, what the snippet printed
for the Python API, and "traceback" where one was printed. Cases that need what this
machine lacks (a second device, a small disk) say so and name the test that fakes it.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from interrupt_latency import VOLUME_SCRIPT, measure  # noqa: E402

PHASE = ["--phase", "paganin", "--delta-beta", "200", "--energy", "25", "--distance", "0.3",
         "--pixel-size", "3e-6"]
CONE = ["c.h5", "--geometry", "c-cone.json", "--quiet"]


def short(text, width=110):
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


class Tree:
    """One checkout: runs commands and snippets with it, in WORK/NAME."""

    def __init__(self, root, work, name, inputs):
        self.root, self.folder, self.inputs = Path(root).resolve(), work / name, inputs
        self.folder.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ, PYTHONPATH=str(self.root), PYTHONWARNINGS="default")
        # An editable install maps pybp.templates to its own checkout, which a bare
        # PYTHONPATH does not override: OLD then renders this checkout's kernels.
        where = self.run([sys.executable, "-c", "from pybp.cl import codegen; "
                          "print(codegen.templates_dir().resolve())"], work).stdout.strip()
        if not where.startswith(str(self.root)):
            sys.exit(f"findings: {root} takes its templates from {where or '?'}; link "
                     f"{root}/pybp/templates to {root}/templates")

    def fresh(self, name):
        """An empty folder for one case, with links to the shared inputs."""
        folder = self.folder / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        for f in self.inputs.iterdir():
            (folder / f.name).symlink_to(f)
        return folder

    def run(self, argv, cwd, timeout=900, env=None):
        return subprocess.run(argv, cwd=cwd, env=dict(self.env, **(env or {})), timeout=timeout,
                              capture_output=True, text=True)

    def cli(self, cwd, *args, **kw):
        return self.run([sys.executable, "-m", "pybp", "reconstruct", *args] if args[0] not in (
            "demo", "preview", "--help") else [sys.executable, "-m", "pybp", *args], cwd, **kw)

    def py(self, cwd, code, **kw):
        """A snippet's printed outcome; an exception is caught and printed as one line."""
        body = textwrap.indent(textwrap.dedent(code), "    ")
        wrapped = ("import numpy as np, pybp, warnings, json, sys\ntry:\n" + body +
                   "\nexcept Exception as e:\n    print(f'{type(e).__name__}: {e}')\n")
        r = self.run([sys.executable, "-c", wrapped], cwd, **kw)
        out = r.stdout.strip() or said(r)
        return out + (" (traceback)" if "Traceback" in r.stderr else "")


def said(r):
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    text = f"exit {r.returncode}" + (", traceback" if "Traceback" in r.stderr else "")
    return text + (f": {short(lines[-1])}" if lines else "")


def slices(folder):
    import tifffile
    return {f.name: tifffile.imread(f) for f in sorted(Path(folder).glob("*.tif"))}


def largest(a, b):
    common = sorted(set(a) & set(b))
    return max(float(np.abs(a[k].astype(np.float64) - b[k]).max()) for k in common)


# ---- 1. resume is bit for bit or refused ------------------------------------------------

def cone_resume_grid(tree, change):
    d = tree.fresh("cone-resume-" + next(iter(change)))
    spec = json.loads((d / "c-cone.json").read_text())
    (d / "b.json").write_text(json.dumps(dict(spec, **change)))
    for out, geometry in (("a", "c-cone.json"), ("b", "b.json"), ("mixed", "c-cone.json")):
        r = tree.cli(d, "c.h5", "--geometry", geometry, "-o", out, "--quiet")
        if r.returncode:
            return said(r)
    planes = sorted((d / "mixed").glob("*.tif"))
    for f in planes[len(planes) // 2:]:  # as an interrupted run leaves it
        f.unlink()
    r = tree.cli(d, "c.h5", "--geometry", "b.json", "-o", "mixed", "--quiet", "--resume")
    if r.returncode:
        return said(r)
    a, b, mixed = slices(d / "a"), slices(d / "b"), slices(d / "mixed")
    from_a = sum(np.array_equal(mixed[k], a[k]) for k in mixed)
    from_b = sum(np.array_equal(mixed[k], b[k]) for k in mixed)
    return f"exit 0: resumed; {from_a} planes equal volume A, {from_b} volume B"


def phase_rows_and_resume(tree):
    d = tree.fresh("phase")
    common = ["scan.h5", "--quiet", "--rings", "sort", *PHASE]
    r = tree.cli(d, *common, "-o", "whole")
    if r.returncode:
        return said(r)
    # the whole run's axis: with --center auto, a run of some rows finds it from those
    common += ["--center", repr(json.loads((d / "whole" / "pybp.json").read_text())["center"])]
    for out, more in (("rows", ["--rows", "32:64"]), ("resumed", [])):
        r = tree.cli(d, *common, "-o", out, *more)
        if r.returncode:
            return said(r)
    for row in (5, 17, 40):
        (d / "resumed" / f"slice_{row:05d}.tif").unlink()
    r = tree.cli(d, *common, "-o", "resumed", "--resume")
    if r.returncode:
        return "resume: " + said(r)
    whole = slices(d / "whole")
    rows = largest(slices(d / "rows"), whole)
    return (f"--rows 32:64 against the whole run: max |diff| {rows:.2g}; "
            f"resumed: {largest(slices(d / 'resumed'), whole):.2g}")


def resume_other_slices_per_pass(tree):
    d = tree.fresh("spp")
    r = tree.cli(d, "scan.h5", "--quiet", "-o", "out", "--slices-per-pass", "4")
    if r.returncode:
        return said(r)
    whole = slices(d / "out")
    for row in range(0, 64, 3):
        (d / "out" / f"slice_{row:05d}.tif").unlink()
    r = tree.cli(d, "scan.h5", "--quiet", "-o", "out", "--slices-per-pass", "1", "--resume")
    if r.returncode:
        return said(r)
    return f"exit 0: accepted; max |diff| from one run {largest(slices(d / 'out'), whole):.2g}"


# ---- 2. interrupted outputs are never stuck ---------------------------------------------

def watch(tree, d, argv, seen, sig):
    """Start the command; send ``sig`` as soon as ``seen()`` is true."""
    p = subprocess.Popen([sys.executable, "-m", "pybp", "reconstruct", *argv], cwd=d,
                         env=tree.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    start = time.monotonic()
    while p.poll() is None and not seen() and time.monotonic() - start < 300:
        time.sleep(0.0005)
    if p.poll() is None:
        p.send_signal(sig)
    _, err = p.communicate(timeout=300)
    return subprocess.CompletedProcess(p.args, p.returncode, "", err)


def ctrl_c_while_planes_are_written(tree, tries=3):
    rows = []
    for k in range(tries):
        d = tree.fresh(f"planes-{k}")
        out = d / "planes"
        r = watch(tree, d, ["c128.h5", "--geometry", "c128-cone.json", "-o", "planes"],
                  lambda: out.is_dir() and any(out.glob("*.tif")), signal.SIGINT)
        time.sleep(1)  # anything still writing has ended
        on_disk = len(list(out.glob("*.tif"))) if out.is_dir() else 0
        meta = "kept" if (out / "pybp.json").exists() else "gone"
        lines = [x for x in r.stderr.splitlines() if "interrupted" in x]
        resumed = tree.cli(d, "c128.h5", "--geometry", "c128-cone.json", "-o", "planes",
                           "--quiet", "--resume")
        rows.append(f"said \"{short(lines[-1] if lines else said(r), 60)}\", {on_disk} on disk, "
                    f"pybp.json {meta}; --resume "
                    f"{said(resumed) if resumed.returncode else 'exit 0'}")
    return "<br>".join(rows)


def kill_after_partial(tree):
    d = tree.fresh("kill")
    r = watch(tree, d, ["scan.h5", "-o", "r.h5", "--quiet"],
              lambda: (d / "r.h5.partial").exists(), signal.SIGKILL)
    size = (d / "r.h5.partial").stat().st_size if (d / "r.h5.partial").exists() else None
    outcome = [f"killed ({r.returncode}), partial of {size} bytes"]
    for flag in ("--resume", "--overwrite"):
        r = tree.cli(d, "scan.h5", "-o", "r.h5", "--quiet", flag)
        outcome.append(f"{flag}: {said(r) if r.returncode else 'exit 0, r.h5 made'}")
        if not r.returncode:
            break
    return "; ".join(outcome)


# ---- 3. Ctrl-C within a second ----------------------------------------------------------

def latency(tree, command, delays, ready=None, env=None, second=0.0):
    saved = dict(os.environ)
    os.environ.update(tree.env, **(env or {}))
    try:
        results = [measure(command, delay, ready, second) for delay in delays]
    finally:
        os.environ.clear()
        os.environ.update(saved)
    done = [r for r in results if r is not None]
    if not done:
        return "finished before each signal"
    seconds = [r[0] for r in done]
    raised = [float(r[2].split()[2]) for r in done if r[2].startswith("KeyboardInterrupt after")]
    tracebacks = sum(r[3] for r in done)
    return ((f"raised in {min(raised):.2f}-{max(raised):.2f} s, " if raised else "") +
            f"{min(seconds):.2f}-{max(seconds):.2f} s to the process's end ({len(done)} tries), "
            f"{tracebacks} tracebacks")


def ctrl_c_reconstruct(tree):
    script = textwrap.dedent(VOLUME_SCRIPT.format(size=2048, volume=8))
    return latency(tree, [sys.executable, "-c", script], [3, 6], "started",
                   env={"PYBP_DEVICE": "pthread"})


def ctrl_c_ring_median(tree):
    d = tree.fresh("ring255")
    os.chdir(d)
    return latency(tree, [sys.executable, "-m", "pybp", "reconstruct", "big.h5", "-o", "out",
                          "--rings", "sort", "--ring-options", "size=255"], [8, 20])


def empty_caches(folder):
    """The environment of a first run: pybp's, pyopencl's and PoCL's caches in ``folder``."""
    return {"XDG_CACHE_HOME": str(folder), "PYBP_CACHE_DIR": str(folder / "pybp"),
            "POCL_CACHE_DIR": str(folder / "pocl")}


BUILD = """
import time, numpy as np, pybp
print("started", flush=True)
try:
    pybp.fbp(np.ones((2048, 2048), np.float32), np.linspace(0, np.pi, 2048, endpoint=False))
    print("finished", flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt at", time.time(), flush=True)
"""


def ctrl_c_first_build(tree):
    results = []
    for delay in (1, 3, 6):
        cache = Path(tempfile.mkdtemp(prefix="cold-"))
        env = dict(empty_caches(cache), PYBP_DEVICE="pthread")
        results.append(latency(tree, [sys.executable, "-c", BUILD], [delay], "started", env))
        shutil.rmtree(cache, ignore_errors=True)
    return "; ".join(results)


def ctrl_c_twice(tree):
    d = tree.fresh("twice")
    os.chdir(d)
    return latency(tree, [sys.executable, "-m", "pybp", "demo", "--size", "2048", "--output",
                          "d.png", "--overwrite"], [1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5], second=0.05)


# ---- 4. silently wrong results become errors --------------------------------------------

CONE_DATA = """
    from pybp.io.demo import cone_scan
    g, degrees, p, flats, darks, _ = cone_scan(32, 64, n_frames=2)
    p = -np.log((p.astype(np.float32) - darks.mean(0)) / (flats.mean(0) - darks.mean(0)))
"""

CASES_4 = {
    "`ConeGeometry.circular(np.degrees(angles), ...)`, then FDK": CONE_DATA + """
    from pybp.io.demo import cone_circular
    right = pybp.fdk(p, g)
    wrong = pybp.fdk(p, pybp.ConeGeometry.circular(degrees, **cone_circular(32)))
    r = np.corrcoef(right.ravel(), wrong.ravel())[0, 1]
    print(f"accepted; correlates {r:.2f} with the right one")
    """,
    "`find_center(sino, theta_in_degrees)`": """
    n = 128
    sino = np.ones((n, n), np.float32)
    sino[:, 40:80] = 2
    print("accepted: centre", pybp.find_center(sino, np.linspace(0, 180, n, endpoint=False)))
    """,
    "`out=` is the input: `fdk(p, g, out=p, memory_limit=...)`": """
    g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 64, endpoint=False), (64, 64), 1.0,
                                   160.0, 80.0, (64, 64, 64), 0.5)
    p = np.random.default_rng(1).random((64, 64, 64)).astype(np.float32)
    want = pybp.fdk(p, g, memory_limit=1 << 20)  # in slabs
    pybp.fdk(p, g, out=p, memory_limit=1 << 20)
    print(f"accepted; wrong by {np.abs(p - want).max():.3g}")
    """,
    "`out=` is the input: `reconstruct(p, angles, out=p)`": """
    angles = np.linspace(0, np.pi, 64, endpoint=False)
    p = np.random.default_rng(1).random((64, 64, 64)).astype(np.float32) + 0.5
    want = pybp.reconstruct(p, angles, log=False, progress=False)
    pybp.reconstruct(p, angles, out=p, log=False, progress=False)
    print(f"accepted; wrong by {np.abs(p - want).max():.3g}")
    """,
    "one `ConeBackprojector` from 3 threads": """
    import threading
    g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 48, endpoint=False), (32, 40), 1.0,
                                   80.0, 40.0, (32, 32, 32), 1.0)
    data = [np.random.default_rng(k).random((48, 32, 40)).astype(np.float32) for k in range(3)]
    bp = pybp.ConeBackprojector(g)
    want = [bp(x) for x in data]
    wrong = 0
    for attempt in range(3):
        got = [None] * 3
        threads = [threading.Thread(target=lambda k=k: got.__setitem__(k, bp(data[k])))
                   for k in range(3)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        wrong += any(not np.array_equal(a, b) for a, b in zip(got, want))
    print(f"{wrong} of 3 tries gave a wrong volume")
    """,
    "NaN in line integrals: `cone_backproject`, `fdk`, `reconstruct(log=False)`": """
    g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 16, endpoint=False), (12, 12), 1.0,
                                   40.0, 20.0, (8, 8, 8), 1.0)
    data = np.ones((16, 12, 12), np.float32)
    data[3, 6, 6] = np.nan
    said = []
    for name, call in (("cone_backproject", lambda: pybp.cone_backproject(data, g)),
                       ("fdk", lambda: pybp.fdk(data, g)),
                       ("reconstruct", lambda: pybp.reconstruct(
                           data, np.linspace(0, np.pi, 16, endpoint=False), log=False,
                           progress=False))):
        try:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                v = call()
            said.append(f"{name}: {np.isnan(v).sum()} NaN out" + (f", warned" if w else ""))
        except Exception as e:
            said.append(f"{name}: {type(e).__name__}: {str(e)[:60]}")
    print("; ".join(said))
    """,
}


def ring_sigma_underflow(tree):
    d = tree.fresh("sigma")
    r = tree.cli(d, "scan.h5", "-o", "s.npy", "--quiet", "--rings", "fw", "--ring-options",
                 "sigma=1e-200")
    if r.returncode:
        return said(r)
    return f"exit 0; {int(np.isnan(np.load(d / 's.npy')).sum())} NaN voxels"


# ---- 5. no tracebacks, 6. errors that say what is wrong ---------------------------------

def geometry_case(change, out="v"):
    def case(tree):
        d = tree.fresh("geometry")
        spec = json.loads((d / "c-cone.json").read_text())
        made = dict(spec, **change)
        if "vectors" in change:
            del made["circular"]
            (d / "folder").mkdir()
            os.mkfifo(d / "fifo")
        (d / "bad.json").write_text(json.dumps(made))
        return said(tree.cli(d, "c.h5", "--geometry", "bad.json", "-o", out, "--quiet"))
    return case


def nested_json(tree):
    d = tree.fresh("nested")
    (d / "deep.json").write_text("[" * 100000 + "]" * 100000)
    return said(tree.cli(d, "c.h5", "--geometry", "deep.json", "-o", "v", "--quiet"))


def command(*argv, finite=None):
    def case(tree):
        d = tree.fresh("command")
        r = tree.cli(d, *argv)
        text = said(r)
        if finite and r.returncode == 0:
            text += f"; {int((~np.isfinite(np.load(d / finite))).sum())} non-finite voxels"
        return text
    return case


def raw_counts_contiguous(tree):
    d = tree.fresh("counts")
    import h5py
    with h5py.File(d / "scan.h5") as f, h5py.File(d / "counts.h5", "w") as g:
        g["exchange/data"] = f["exchange/data"][:]  # contiguous, no flats or darks
        g["exchange/theta"] = f["exchange/theta"][:]
    return said(tree.cli(d, "counts.h5", "-o", "o", "--quiet"))


CASES_6 = {
    "`memory_limit=float('inf')`": """
    g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 16, endpoint=False), (12, 12), 1.0,
                                   40.0, 20.0, (16, 8, 8), 1.0)
    pybp.fdk(np.ones((16, 12, 12), np.float32), g, memory_limit=float("inf"))
    print("accepted")
    """,
    "phase values as `np.int64`/`np.float32`": """
    angles = np.linspace(0, np.pi, 16, endpoint=False)
    data = np.ones((16, 4, 12), np.float32)
    phase = dict(delta_beta=np.int64(200), energy=np.float32(25), distance=0.3, pixel_size=3e-6)
    v = pybp.reconstruct(data, angles, np.ones((1, 4, 12)) * 2, np.zeros((1, 4, 12)),
                         phase=phase, progress=False)
    print("accepted, finite" if np.isfinite(v).all() else "accepted, not finite")
    """,
    "`planes=(0.5, 3.7)`": """
    g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 16, endpoint=False), (12, 12), 1.0,
                                   40.0, 20.0, (16, 8, 8), 1.0)
    pybp.ConeBackprojector(g, planes=(0.5, 3.7))
    print("accepted")
    """,
    "`chunk_slices=0`, `-4`, `2.5`": """
    angles = np.linspace(0, np.pi, 16, endpoint=False)
    data = np.ones((16, 4, 12), np.float32)
    said = []
    for bad in (0, -4, 2.5):
        try:
            pybp.reconstruct(data, angles, log=False, chunk_slices=bad, progress=False)
            said.append(f"{bad}: accepted")
        except Exception as e:
            said.append(f"{bad}: {type(e).__name__}: {str(e)[:50]}")
    print("; ".join(said))
    """,
}


# ---- 7. the first hour ------------------------------------------------------------------

def first_build_output(tree):
    """On a terminal (``script``), as a user sees it: pybp's notice, and any other line
    that is not the command's own report (a compiler's, pyopencl's warnings)."""
    said = []
    for runtime in ("pthread", "Intel"):
        d = tree.fresh(f"first-{runtime}")
        env = dict(empty_caches(d / "cache"), PYBP_DEVICE=runtime)
        lines = []
        for command in (["scan.h5", "-o", "o.npy", "--rings", "fw", *PHASE], [*CONE, "-o", "v"]):
            line = " ".join([sys.executable, "-m", "pybp", "reconstruct", *command])
            r = tree.run(["script", "-qec", line, "/dev/null"], d, env=env)
            lines += [x.strip() for x in re.split(r"[\r\n]+", r.stdout) if x.strip()]
        own = ("input:", "center:", "reconstructed", "pybp: building", "pybp: ")
        stray = [x for x in lines if not x.startswith(own)]
        notice = any(x.startswith("pybp: building") for x in lines)
        said.append(f"{runtime}: exit {r.returncode}, notice {'shown' if notice else 'none'}, "
                    f"{len(stray)} other lines" + (f" ({short(stray[0], 50)})" if stray else ""))
    return "; ".join(said)


FIRST_CALLS = """
import numpy as np, pybp
g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 64, endpoint=False), (64, 64), 1.0,
                               160.0, 80.0, (64, 64, 64), 0.5)
p = np.random.default_rng(1).random((64, 64, 64)).astype(np.float32)
pybp.fdk(p, g, memory_limit=1 << 20)
pybp.reconstruct(p, np.linspace(0, np.pi, 64, endpoint=False), log=False, rings="fw",
                 progress=False)
"""


def first_calls_stderr(tree):
    """The API's first calls in fresh caches: what reaches standard error."""
    said = []
    for runtime in ("pthread", "Intel"):
        d = tree.fresh(f"first-api-{runtime}")
        env = dict(empty_caches(d / "cache"), PYBP_DEVICE=runtime)
        r = tree.run([sys.executable, "-c", FIRST_CALLS], d, env=env)
        lines = [x.strip() for x in r.stderr.splitlines() if x.strip()]
        warned = [x for x in lines if "Warning" in x]
        said.append(f"{runtime}: exit {r.returncode}, {len(lines)} lines" +
                    (f" ({len(warned)} x {short(warned[0].split(': ', 1)[-1], 40)})"
                     if warned else ""))
    return "; ".join(said)


CASES_7 = {
    "`fdk(..., progress=True)`": """
    g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 16, endpoint=False), (12, 12), 1.0,
                                   40.0, 20.0, (8, 8, 8), 1.0)
    pybp.fdk(np.zeros((16, 12, 12), np.float32), g, progress=True)
    print("accepted")
    """,
    "`print(geometry)`, `dir(pybp)`": """
    g = pybp.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 360, endpoint=False), (12, 12), 1.0,
                                   40.0, 20.0, (8, 8, 8), 1.0)
    print(f"print: {len(str(g).splitlines())} lines; "
          f"dir(pybp) has importlib: {'importlib' in dir(pybp)}")
    """,
}


def help_speaks_of_cone(tree):
    r = tree.cli(tree.folder, "--help")
    return "mentions cone beam" if "cone" in r.stdout.lower() else "parallel beam only"


def missing_parent(tree):
    d = tree.fresh("parent")
    r = tree.cli(d, "scan.h5", "-o", "no/such/out", "--quiet")
    made = (d / "no").exists()
    return f"{said(r) if r.returncode else 'exit 0'}; parent folders made: {made}"


def preview_names_and_sections(tree):
    d = tree.fresh("preview")
    names = []
    for out in ("v.h5", "v.npy"):
        r = tree.cli(d, *CONE, "-o", out)
        if r.returncode:
            return said(r)
        before = set(d.iterdir())
        r = tree.cli(d, "preview", out)
        made = sorted(set(d.iterdir()) - before)
        if r.returncode or not made:
            return f"preview {out}: {said(r)}"
        png = made[0].read_bytes()
        names.append(f"{out} -> {made[0].name} "
                     f"({int.from_bytes(png[16:20], 'big')} x {int.from_bytes(png[20:24], 'big')})")
    r = tree.cli(d, "preview", "nosuch")
    return "; ".join(names) + f"; `preview nosuch`: {said(r)}"


# -----------------------------------------------------------------------------------------

def snippets(item, cases):
    """Rows for Python snippets: each prints its outcome (:meth:`Tree.py`)."""
    return [(item, words, lambda t, c=code: t.py(t.fresh("api"), c))
            for words, code in cases.items()]


FINDINGS = [
    ("1", "cone `--resume` with another `voxel_size`",
     lambda t: cone_resume_grid(t, {"voxel_size": 1.1})),
    ("1", "cone `--resume` with another `volume_offset`",
     lambda t: cone_resume_grid(t, {"volume_offset": [0, 0, 1.0]})),
    ("1", "`--phase paganin --rings sort`: `--rows 32:64` (the same axis) and a resume, "
          "against one run",
     phase_rows_and_resume),
    ("1", "`--resume` with another `--slices-per-pass`", resume_other_slices_per_pass),
    ("2", "Ctrl-C as cone TIFF planes are written (128^3), then `--resume`",
     ctrl_c_while_planes_are_written),
    ("2", "SIGKILL just after `r.h5.partial` is made", kill_after_partial),
    ("3", "Ctrl-C, `pybp.reconstruct` of 8 x 2048^2 on PoCL (at 3 and 6 s)", ctrl_c_reconstruct),
    ("3", "Ctrl-C, `--rings sort --ring-options size=255`, 256 x 1024^2 (at 8 and 20 s)",
     ctrl_c_ring_median),
    ("3", "Ctrl-C during the first kernel builds, `pybp.fbp` 2048^2, empty caches (at 1, 3, 6 s)",
     ctrl_c_first_build),
    ("3", "Ctrl-C twice, 50 ms apart, `pybp demo --size 2048` (8 tries)", ctrl_c_twice),
    *snippets("4", CASES_4),
    ("4", "`--rings fw --ring-options sigma=1e-200`", ring_sigma_underflow),
    ("5", "`--ring-options sigma=inf`",
     command("scan.h5", "-o", "o.npy", "--quiet", "--rings", "fw", "--ring-options", "sigma=inf")),
    ("5", "`--ring-options sigma=1e308`",
     command("scan.h5", "-o", "o.npy", "--quiet", "--rings", "fw", "--ring-options",
             "sigma=1e308", finite="o.npy")),
    ("5", "`--pixel-size 1e-300`",
     command("scan.h5", "-o", "o.npy", "--quiet", *PHASE[:-1], "1e-300", finite="o.npy")),
    ("5", "`--pixel-size 1e300`",
     command("scan.h5", "-o", "o.npy", "--quiet", *PHASE[:-1], "1e300", finite="o.npy")),
    ("5", "`volume_shape` `[2**62]*3`", geometry_case({"volume_shape": [2 ** 62] * 3})),
    ("5", "`volume_shape` `[64, 2**32, 2**32]`, `.npy` output",
     geometry_case({"volume_shape": [64, 2 ** 32, 2 ** 32]}, "v.npy")),
    ("5", "a deeply nested geometry JSON", nested_json),
    ("5", "`pybp demo --cone --write-scan s.h5 --size 100000`",
     command("demo", "--cone", "--write-scan", "s.h5", "--size", "100000")),
    ("5", "raw counts, contiguous `/exchange/data`, no flats or darks", raw_counts_contiguous),
    *snippets("6", CASES_6),
    ("6", "`\"vectors\": 5`", geometry_case({"vectors": 5})),
    ("6", "`vectors` a folder", geometry_case({"vectors": "folder"})),
    ("6", "`vectors` a FIFO", geometry_case({"vectors": "fifo"})),
    ("6", "`source_origin` 1e308", geometry_case(
        {"circular": {"source_origin": 1e308, "origin_detector": 96.0, "pixel_size": 1.5}})),
    *snippets("7", CASES_7),
    ("7", "the first runs in fresh caches, on a terminal: `reconstruct --rings fw --phase "
          "paganin`, then a cone scan",
     first_build_output),
    ("7", "the first API calls in fresh caches (`fdk` in slabs, `reconstruct` with fw): "
          "standard error",
     first_calls_stderr),
    ("7", "`pybp --help`", help_speaks_of_cone),
    ("7", "`-o no/such/out`", missing_parent),
    ("7", "`pybp preview` of a cone `v.h5` and `v.npy`; `preview nosuch`",
     preview_names_and_sections),
]


def make_inputs(folder):
    folder.mkdir(parents=True, exist_ok=True)
    demo = [sys.executable, "-m", "pybp", "demo", "--write-scan"]
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    for name, more in (("scan.h5", ["--size", "256"]), ("c.h5", ["--cone", "--size", "64"]),
                       ("c128.h5", ["--cone", "--size", "128"]), ("big.h5", ["--size", "1024"])):
        if not (folder / name).exists():
            subprocess.run(demo + [name, *more], cwd=folder, env=env, check=True,
                           capture_output=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="an older checkout to run beside this one")
    parser.add_argument("--only", help="the issue's items to run, comma-separated (default: all)")
    parser.add_argument("--work", type=Path, help="where the inputs and outputs go "
                        "(default: a new temporary folder)")
    args = parser.parse_args()
    if args.before and not (args.before / "pybp" / "__init__.py").is_file():
        parser.error(f"--before: {args.before} holds no pybp/ package")
    only = set(args.only.split(",")) if args.only else None
    unknown = sorted((only or set()) - {item for item, _, _ in FINDINGS})
    if unknown:
        parser.error(f"--only: no item {', '.join(unknown)} (the issue's items are 1 to 7)")
    work = (args.work or Path(tempfile.mkdtemp(prefix="findings-"))).resolve()
    make_inputs(work / "inputs")
    trees = [Tree(HERE.parent, work, "after", work / "inputs")]
    if args.before:
        trees.insert(0, Tree(args.before, work, "before", work / "inputs"))
    print("| # | finding | " + " | ".join(t.folder.name for t in trees) + " |")
    print("| --- | --- |" + " --- |" * len(trees), flush=True)
    for item, words, case in FINDINGS:
        if only and item not in only:
            continue
        cells = []
        for tree in trees:
            try:
                cells.append(case(tree).replace("|", "\\|"))
            except Exception as e:  # the case itself failed: say so in the table
                cells.append(f"case failed: {type(e).__name__}: {short(str(e), 80)}")
            finally:
                os.chdir(work)
        print(f"| {item} | {words} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
