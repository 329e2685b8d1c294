"""The package's layout (docs/architecture.md), read from its imports by
tuning/module_graph.py: no import circle between modules or packages, no private name
imported across modules, no import hidden inside a function, and the geometry-neutral
floors (stream, stages, cl) import no geometry's package; and the wheel's lists."""

import configparser
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tuning"))
import module_graph  # noqa: E402


def test_no_circles_no_private_imports_no_hidden_imports():
    assert module_graph.problems() == []


def test_the_stream_knows_no_geometry():
    edges, _ = module_graph.graph()
    neutral = {"stream", "stages", "cl", "checks"}
    for source, targets in edges.items():
        if module_graph.package_of(source) in neutral:
            reached = {module_graph.package_of(t) for t in targets}
            assert not reached & {"parallel", "api", "geometry", "io", "centre"}, source


def test_the_graph_finds_a_circle_and_a_private_import(tmp_path, monkeypatch):
    """The checks can fail: two modules that import each other, one a private name."""
    (tmp_path / "pybp").mkdir()
    (tmp_path / "pybp" / "__init__.py").write_text("")
    (tmp_path / "pybp" / "a.py").write_text("from pybp.b import _hidden\n")
    (tmp_path / "pybp" / "b.py").write_text("def f():\n    from pybp import a\n")
    monkeypatch.setattr(module_graph, "ROOT", tmp_path)
    found = module_graph.problems()
    assert any("private _hidden" in p for p in found)
    assert any("inside a function" in p for p in found)
    assert any("circle" in p for p in found)


def test_the_wheel_lists_every_package_and_template_folder():
    """setup.cfg names each package and each folder of templates: one left out is
    missing from the wheel, though an editable install finds it."""
    root = Path(__file__).resolve().parents[1]
    config = configparser.ConfigParser()
    config.read(root / "setup.cfg")
    listed = set(config["options"]["packages"].split())
    packages = {".".join(p.parent.relative_to(root).parts)
                for p in (root / "pybp").rglob("__init__.py")}
    assert packages <= listed, f"setup.cfg lacks {sorted(packages - listed)}"
    patterns = {p.strip() for p in config["options.package_data"]["pybp.templates"].split(",")}
    folders = {str(p.parent.relative_to(root / "templates")) for p in
               (root / "templates").rglob("*.mako")}
    wanted = {"*.mako" if f == "." else f"{f}/*.mako" for f in folders}
    assert wanted <= patterns, f"setup.cfg lacks {sorted(wanted - patterns)}"
