"""The README and the guide's pages run as written: every ``bash`` and ``python`` block of
README.md, then of docs/guide.md, geometries.md, command.md and devices.md, in that
order, in one fresh folder (the pages use the README's demo scans), on this machine's
default device. The one thing left out is installing: the
commands that make a virtual environment, build or install pybp (``python3 -m venv``,
``. .venv/bin/activate``, ``pip install``, ``python -m build``) and the test command
(this test is part of it), since the tests run where pybp is installed already. Blocks
fenced as ``text`` are synopses and commands for other machines (a cluster, CI's tools).

pybp's cache is a copy of this one's (kernels built once), so that ``pybp tune`` in the
README changes no profile the other tests use."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pybp.cl import cache

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README] + [ROOT / "docs" / f"{name}.md" for name in ("guide", "geometries", "command",
                                                               "devices")]
INSTALLING = re.compile(r"^(python3? -m (venv|build)|\. \.venv/bin/activate|pip install|pytest)\b")
BLOCK_SECONDS = 600


def blocks(text):
    """``(language, code, line)`` of each fenced block of ``text``, in order."""
    return [(m.group(1), m.group(2), text[:m.start()].count("\n") + 1)
            for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def runnable(code):
    """A bash block's commands, less those that install (each ``&&`` part alone)."""
    kept = []
    for line in code.splitlines():
        parts = [p.strip() for p in line.split("&&")]
        parts = [p for p in parts if p and not INSTALLING.match(p)]
        if parts:
            kept.append(" && ".join(parts))
    return "\n".join(kept)


def test_every_fence_is_bash_python_or_text():
    for page in PAGES:
        assert {language for language, _, _ in blocks(page.read_text())} <= \
            {"bash", "python", "text"}, page.name


def test_the_readme_runs_in_order(tmp_path):
    folder = tmp_path / "cache"
    if cache.cache_dir().is_dir():
        shutil.copytree(cache.cache_dir(), folder)
    env = dict(os.environ, PYBP_CACHE_DIR=str(folder), PYTHONUNBUFFERED="1")
    work = tmp_path / "work"
    work.mkdir()
    ran = 0
    for page, (language, code, line) in ((page, block) for page in PAGES
                                         for block in blocks(page.read_text())):
        if language == "bash":
            command = ["bash", "-e", "-c", runnable(code)]
        elif language == "python":
            command = [sys.executable, "-c", code]
        else:
            continue
        result = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True,
                                timeout=BLOCK_SECONDS)
        assert result.returncode == 0, (f"{page.name} line {line}: the {language} block "
                                        f"failed:\n{code}\n{result.stdout[-2000:]}\n"
                                        f"{result.stderr[-3000:]}")
        ran += 1
    assert ran >= 20
    assert (work / "pybp-demo.png").exists() and (work / "pybp-demo-cone.png").exists()
    assert (work / "volume-preview.png").exists() and (work / "slices-fw").is_dir()


def test_the_readme_is_a_door():
    """The README is the door, at most about 300 lines: what pybp is, install, the first
    examples, one table of figures and the links (issue 68); the rest is in docs/."""
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    for page in ("guide", "geometries", "command", "devices", "accuracy", "benchmarks",
                 "portability", "architecture"):
        assert f"](docs/{page}.md" in text, page


def test_the_api_reference_names_every_public_name():
    """docs/reference.md renders each name ``import pybp`` gives from its home module, so a
    new public name is documented or this fails (mkdocs build --strict checks that each
    one resolves)."""
    import pybp

    text = (ROOT / "docs" / "reference.md").read_text()
    listed = re.findall(r"^::: pybp\.(\S+)$", text, re.M)
    assert sorted(listed) == sorted(f"{home}.{name}" for name, home in pybp._HOMES.items())
