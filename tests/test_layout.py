"""The package's layout (docs/architecture.md), read from its imports by
tuning/module_graph.py: no import circle between modules or packages, no private name
imported across modules, no import hidden inside a function, and the geometry-neutral
floors (stream, stages, cl) import no geometry's package; and the wheel's lists."""

import ast
import configparser
import re
import subprocess
import sys
from pathlib import Path

import pytest

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
            assert not reached & {"parallel", "api", "geometry", "io"}, source


def test_the_geometries_stand_side_by_side_above_the_stream():
    """parallel/ and cone/ on one floor: neither reaches the other through any import;
    both stand on stream/; what both use (geometry/, phantoms, stages/) reaches neither."""
    packages = module_graph.package_edges(module_graph.graph()[0])
    parallel, cone = module_graph.GEOMETRIES
    assert cone not in module_graph.reaches(packages, parallel)
    assert parallel not in module_graph.reaches(packages, cone)
    for package in GEOMETRY_FREE_FLOORS:
        assert not set(module_graph.GEOMETRIES) & module_graph.reaches(packages, package), package
    for geometry in module_graph.GEOMETRIES:
        assert "stream" in module_graph.reaches(packages, geometry)


GEOMETRY_FREE_FLOORS = ("stream", "stages", "geometry", "phantoms", "cl", "io")


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
    # setuptools' rule for a list: a value of several lines is one entry a line (commas
    # and all), else entries between commas. A pattern list written over two lines with
    # commas once put only its last line's templates into the wheel.
    value = config["options.package_data"]["pybp.templates"].strip()
    patterns = {p.strip() for p in (value.splitlines() if "\n" in value else value.split(","))}
    folders = {str(p.parent.relative_to(root / "templates")) for p in
               (root / "templates").rglob("*.mako")}
    wanted = {"*.mako" if f == "." else f"{f}/*.mako" for f in folders}
    assert wanted <= patterns, f"setup.cfg lacks {sorted(wanted - patterns)}"


def test_docs_and_comments_name_only_files_that_exist():
    """Every path of this repository that the README, docs/, the code, the templates and
    tuning/ name (``pybp/parallel/verify.py``, ``templates/stages/fft.cl.mako``) is
    there: a file moved or removed leaves no reader looking for it."""
    root = Path(__file__).resolve().parents[1]
    named = re.compile(r"(?<![\w/.-])((?:pybp|templates|tuning|docs|tests|\.ci)/[\w./-]*\w)")
    texts = [root / "README.md", *root.glob("docs/*.md"), *root.glob("pybp/**/*.py"),
             *root.glob("templates/**/*.mako"), *root.glob("tuning/*.py"),
             *root.glob("tests/*.py")]
    missing = [f"{text.relative_to(root)}:{i}: {path}"
               for text in texts for i, line in enumerate(text.read_text().splitlines(), 1)
               for path in named.findall(line)
               if "*" not in path and "{" not in path and not (root / path).exists()]
    assert missing == []


def test_files_named_in_git_history_are_there():
    """A removed script the docs still cite for a figure is named with the commit whose
    tuning/ holds it, ``file_speed.py@82c47bc`` (``git show`` of the commit's file
    prints it): each such name is a file of that commit. Run where the tests are a clone
    of the repository."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        pytest.skip("not a clone of the repository: no history to look in")
    named = re.compile(r"(?<![\w/.-])([\w-]+\.(?:py|sh))@([0-9a-f]{7,40})\b")
    texts = [root / "README.md", *root.glob("docs/*.md"), *root.glob("pybp/**/*.py"),
             *root.glob("tuning/*.py"), *root.glob("tuning/*.md"), *root.glob("tests/*.py"),
             *root.glob("templates/**/*.mako")]
    cited = {(rev, name): f"{text.relative_to(root)}:{i}"
             for text in texts for i, line in enumerate(text.read_text().splitlines(), 1)
             for name, rev in named.findall(line)}
    assert cited, "no file of the history named: the pattern or the docs changed"
    missing = [f"{where}: {name}@{rev}" for (rev, name), where in sorted(cited.items())
               if subprocess.run(["git", "-C", str(root), "cat-file", "-e",
                                  f"{rev}:tuning/{name}"], capture_output=True).returncode != 0]
    assert missing == []


def test_the_architecture_docs_graph_is_the_codes():
    """docs/architecture.md's picture of the packages is the one tuning/module_graph.py
    draws from the imports: the same arrows, in any order (it was five arrows and a
    package behind the code once)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    drawn = text.split("```mermaid\n", 1)[1].split("```", 1)[0]
    code = module_graph.mermaid(module_graph.graph()[0])
    assert set(drawn.split("\n")) - {""} == set(code.split("\n")) - {""}


def test_dask_runs_a_geometrys_task_and_imports_no_geometry():
    """distributed.py runs any geometry's task (parallel/prepare.py's RowsTask,
    cone/run.py's PlanesTask) on the workers: it reaches no geometry's package."""
    edges, _ = module_graph.graph()
    reached = {module_graph.package_of(t) for t in edges["pybp.distributed"]}
    assert "stream" in reached and not reached & {"parallel", "cone", "geometry"}, reached


# The kinds' own packages: a geometry's types, and each kind's module and what it calls
KIND_HOMES = ("geometry", "parallel", "cone", "fan")
# Words that name a geometry, or a geometry file's or ASTRA's kind of one
GEOMETRY_WORDS = {"cone", "parallel", "parallel3d", "parallel3d_vec", "cone_vec", "fanflat",
                  "fanflat_vec", "fan", "circular", "vectors", "parallel_vectors", "matrices",
                  "laminography", "ConeGeometry", "ParallelGeometry", "Geometry",
                  "ParallelVectorGeometry", "FDK", "FBP"}
# Flags whose truth chooses a geometry (``if args.cone:``)
FLAG_WORDS = {"cone", "geometry", "laminography", "fan"}



def _words(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def geometry_branches(root: Path) -> list:
    """``(file, function, what)`` of each place in pybp/, outside the kinds' packages and
    registry.py, that chooses a geometry itself: an ``isinstance`` of a geometry type,
    a kind's ``whole``, a string compare with a geometry's name, ``type(x).__name__``
    compared, or a geometry flag's truth."""
    found = []
    for path in sorted((root / "pybp").rglob("*.py")):
        rel = path.relative_to(root / "pybp")
        if rel.parts[0] in KIND_HOMES or rel.as_posix() == "registry.py":
            continue
        tree = ast.parse(path.read_text())
        owner = {}

        def visit(node, name):
            for child in ast.iter_child_nodes(node):
                here = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                        ast.ClassDef)) else name
                owner[id(child)] = here
                visit(child, here)

        visit(tree, "<module>")
        for node in ast.walk(tree):
            what = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("isinstance", "issubclass") and len(node.args) == 2 and \
                    any(w.endswith("Geometry") for w in _words(node.args[1])):
                what = "isinstance"
            elif isinstance(node, ast.Attribute) and node.attr == "whole":
                what = ".whole"
            elif isinstance(node, ast.Compare) or (
                    isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("startswith", "endswith")):
                texts = {n.value for n in ast.walk(node)
                         if isinstance(n, ast.Constant) and isinstance(n.value, str)}
                typed = any(isinstance(n, ast.Attribute) and n.attr == "__name__"
                            and isinstance(n.value, ast.Call)
                            and getattr(n.value.func, "id", None) == "type"
                            for n in ast.walk(node))
                if texts & GEOMETRY_WORDS or typed:
                    what = "compare " + "/".join(sorted(texts & GEOMETRY_WORDS) or ["__name__"])
            elif isinstance(node, (ast.If, ast.IfExp)):
                test = node.test.operand if isinstance(node.test, ast.UnaryOp) else node.test
                if isinstance(test, ast.Attribute) and test.attr in FLAG_WORDS or \
                        isinstance(test, ast.Name) and test.id in FLAG_WORDS:
                    what = f"flag {ast.unparse(test)}"
            if what:
                found.append((rel.as_posix(), owner.get(id(node), "<module>"), what))
    return sorted(found)


def test_nothing_above_the_kinds_chooses_a_geometry():
    """Over the whole package: no code outside geometry/, the kinds' packages and
    registry.py branches on a geometry's type, on a kind's ``whole``, on a geometry's
    name or key, or on a geometry flag (issue 68): each such choice is a kind's (its
    geometry file's readers, its commands' runners, its volumes)."""
    assert geometry_branches(Path(__file__).resolve().parents[1]) == []


def test_the_geometry_branch_finder_finds_each_form(tmp_path):
    """The finder sees each form it looks for (the check above can fail)."""
    (tmp_path / "pybp" / "api").mkdir(parents=True)
    (tmp_path / "pybp" / "cone").mkdir()
    (tmp_path / "pybp" / "api" / "a.py").write_text(
        "def f(g, kind, args, spec):\n"
        "    if isinstance(g, ConeGeometry):\n        pass\n"
        "    if kind.whole:\n        pass\n"
        "    if spec['type'] == 'fanflat':\n        pass\n"
        "    if type(g).__name__ == 'X':\n        pass\n"
        "    if not args.cone:\n        pass\n"
        "    if spec.startswith('parallel3d'):\n        pass\n")
    (tmp_path / "pybp" / "cone" / "b.py").write_text(
        "def f(g):\n    return isinstance(g, ConeGeometry)\n")
    found = geometry_branches(tmp_path)
    assert [what for _, _, what in found] == sorted(
        ["isinstance", ".whole", "compare fanflat", "compare __name__", "flag args.cone",
         "compare parallel3d"]), found
    assert {(file, function) for file, function, _ in found} == {("api/a.py", "f")}


def test_the_registry_names_every_geometry_and_refuses_others():
    import numpy as np

    import pybp
    from pybp import registry

    cone = pybp.ConeGeometry.circular(np.linspace(0, 6, 8), (4, 6), 1.0, 50.0, 20.0,
                                      (4, 6, 6), 0.5)
    parallel = pybp.ParallelGeometry(np.linspace(0, 3, 8), 16)
    assert registry.kind_of(cone).filtered == "FDK" and registry.kind_of(cone).whole
    assert not registry.kind_of(parallel).whole and registry.kind_of(parallel).dims == 2
    angles = np.linspace(0, 3, 8)  # pybp.reconstruct takes them as parallel beam's
    assert registry.taking(angles) is registry.taking(parallel) is registry.kind_of(parallel)
    assert registry.taking(cone) is registry.kind_of(cone)
    message = ("geometry: expected a pybp.ParallelGeometry, a pybp.ConeGeometry, a "
               "pybp.ParallelVectorGeometry or a pybp.FanGeometry, got ndarray")
    try:
        registry.kind_of(np.zeros(3))
    except TypeError as exc:
        assert str(exc) == message
    else:
        raise AssertionError("an array taken for a geometry")


def test_the_registry_is_a_protocol_and_a_list():
    """registry.py holds the Kind protocol and the list of kinds, nothing of either
    geometry (issue 68): it imports only the kind modules and the geometry file's reader
    (which knows no kind), branches on no kind, and every kind in the list has all that
    the protocol asks."""
    import ast
    import inspect

    from pybp import registry
    root = Path(__file__).resolve().parents[1]
    tree = ast.parse((root / "pybp" / "registry.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {f"{node.module}.{a.name}" for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) for a in node.names}
    from_pybp = {name for name in imported if name.startswith("pybp")}
    assert from_pybp <= {"pybp.cone", "pybp.parallel", "pybp.cone.kind", "pybp.parallel.kind",
                         "pybp.fan", "pybp.fan.kind",
                         "pybp.io", "pybp.io.geometry_file"}, \
        from_pybp
    for node in ast.walk(tree):  # the list is looked through, no kind chosen by hand
        if isinstance(node, (ast.If, ast.IfExp)):
            words = {n.attr for n in ast.walk(node.test) if isinstance(n, ast.Attribute)} | \
                {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
            assert not words & {"whole", "ConeGeometry", "ParallelGeometry", "Geometry",
                                "ParallelVectorGeometry", "name", "what"}, ast.unparse(node.test)
    wanted = [name for name in registry.Kind.__annotations__] + \
        [name for name, _ in inspect.getmembers(registry.Kind, inspect.isfunction)]
    for kind in registry.KINDS:
        missing = [name for name in wanted if not hasattr(kind, name)]
        assert not missing, (kind, missing)
