#!/usr/bin/env python3
"""The table of docs/portability.md: for each OpenCL implementation on this machine,
each kernel family's verification (``pybp bench``'s check case, 1024 bins, every
setting) and speed, and how long Ctrl-C takes to end a demo.

    python tuning/portability.py [--size 256] [--repeats 3] [--markdown FILE]
        [--setting SLICES-INTERPOLATION-STORAGE ...] [IMPLEMENTATION ...]

An IMPLEMENTATION is ``label=device[@vendors]``: ``device`` as ``PYBP_DEVICE`` takes it,
``vendors`` an ``OCL_ICD_VENDORS`` folder holding that implementation's .icd file (each
runs in a process of its own). The default: the PoCL wheel and Intel's runtime of the
cpu extra. Every implementation runs the same 14 variants x 12 settings of ``pybp
bench`` (kernel time, median of ``repeats`` after a warm-up); ``--setting
1-linear-float``, once for each, runs only those (the smoke test's: each setting is 14
kernels to build). The table gives per family the checks passed, the largest error by
rule, and the best GU/s at one slice (linear, float) and at any width.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from pybp.parallel.params import SETTINGS

BENCH = """
import json, sys, warnings
warnings.simplefilter("ignore")
from pybp.bench import kernels as bench
rows, _ = bench.run(size={size}, repeats={repeats}, settings={settings}, with_silx=False,
                    log=lambda *a: None)
from pybp.cl.device import describe, select_device
d = describe(select_device())
print("JSON" + json.dumps(dict(device=d.name, platform=d.platform_version, driver=d.driver,
                                rows=rows)))
"""
FAMILIES = {"standard": "standard", "locality": "locality", "multiproj/constant": "multiproj",
            "multiproj/local": "multiproj", "alu/hybrid-4of8": "hybrid"}
DEFAULT = ["PoCL 3.0 (wheel)=3.0-rc2", "Intel CPU runtime (pip)=Intel(R) OpenCL"]


def environment(spec):
    label, rest = spec.split("=", 1)
    device, _, vendors = rest.partition("@")
    env = dict(os.environ, PYBP_DEVICE=device, RUSTICL_ENABLE="llvmpipe")
    if vendors:
        env["OCL_ICD_VENDORS"] = vendors
    return label, env


def setting(text):
    """``1-linear-float`` as pybp.parallel.params.SETTINGS holds it."""
    slices, interpolation, storage = text.split("-")
    chosen = (int(slices), interpolation, storage)
    if chosen not in SETTINGS:
        raise argparse.ArgumentTypeError(f"{text}: not one of " + ", ".join(
            "-".join(map(str, s)) for s in SETTINGS))
    return chosen


def bench(env, size, repeats, settings):
    done = subprocess.run([sys.executable, "-c", BENCH.format(size=size, repeats=repeats,
                                                              settings=tuple(settings))],
                          env=env, capture_output=True, text=True)
    line = next((line for line in done.stdout.splitlines() if line.startswith("JSON")), None)
    if line is None:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(line[4:])


def interrupt_seconds(env, delay=4.0, size=3072):
    """Seconds from SIGINT to the end of a demo, started as a user's shell would (SIGINT
    not ignored: a background job of a script ignores it, whatever the implementation)."""
    process = subprocess.Popen([sys.executable, "-m", "pybp", "demo", "--size", str(size),
                                "--output", os.devnull + ".png"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(delay)
    if process.poll() is not None:
        return None
    tick = time.monotonic()
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=120)
    return time.monotonic() - tick if process.returncode == 130 else None


def summarise(label, result, ctrl_c):
    families = {}
    for row in result["rows"]:
        if row.get("verified") is None:
            continue
        family = FAMILIES.get(row["kernel"], "alu")
        f = families.setdefault(family, dict(checks=0, passed=0, errors={}, v1=0.0, best=0.0))
        f["checks"] += 1
        f["passed"] += bool(row["verified"])
        f["errors"][row["rule"]] = max(f["errors"].get(row["rule"], 0.0), row["error"])
        if (row["slices"], row["interpolation"], row["storage"]) == (1, "linear", "float"):
            f["v1"] = max(f["v1"], row["gups"])
        f["best"] = max(f["best"], row["gups"])
    lines = []
    for family, f in families.items():
        errors = ", ".join(f"{rule} {error:.2g}" for rule, error in sorted(f["errors"].items()))
        lines.append(f"| {label} | {family} | {f['passed']}/{f['checks']} | {errors} | "
                     f"{f['v1']:.3g} | {f['best']:.3g} |")
    seconds = "" if ctrl_c is None else f"{ctrl_c:.2f} s"
    platform = result["platform"].split(",")[0].strip()  # PoCL goes on to list its build
    header = (f"| **{label}**: {result['device']} ({platform}, driver {result['driver']}); "
              f"Ctrl-C {seconds or 'not measured'} | | | | | |")
    return [header] + lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("implementations", nargs="*", default=DEFAULT)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-interrupt", action="store_true")
    parser.add_argument("--setting", action="append", type=setting, dest="settings",
                        help="only this setting, as 1-linear-float; again for another "
                             "(default: every one)")
    parser.add_argument("--markdown", help="write the table here too")
    args = parser.parse_args(argv)
    table = ["| implementation | family | checks passed | largest error by rule | GU/s, 1 "
             "slice linear float | best GU/s |", "| --- | --- | --- | --- | --- | --- |"]
    for spec in args.implementations:
        label, env = environment(spec)
        print(f"== {label}", flush=True)
        try:
            result = bench(env, args.size, args.repeats, args.settings or SETTINGS)
        except RuntimeError as error:  # not installed, or it builds no kernel on this CPU
            why = str(error).strip().splitlines()[-1]
            row = f"| **{label}**: not usable here ({why}) | | | | | |"
            print(row, flush=True)
            table.append(row)
            continue
        ctrl_c = None if args.no_interrupt else interrupt_seconds(env)
        rows = summarise(label, result, ctrl_c)
        print("\n".join(rows), flush=True)
        table += rows
    print("\n".join(table))
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write("\n".join(table) + "\n")


if __name__ == "__main__":
    main()
