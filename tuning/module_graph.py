#!/usr/bin/env python3
"""The module graph of pybp, drawn from its imports (nothing is imported or run).

    python3 tuning/module_graph.py            # problems, then the package graph (Mermaid)

Problems: import circles between modules or between packages, private names imported
across modules, and imports inside functions (the ``pybp`` command's Ctrl-C guard in
``pybp/__main__.py`` is the one allowed). tests/test_layout.py fails on any of them;
docs/architecture.md shows the graph this prints.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALLOWED_INNER = {"pybp.__main__"}  # imports the command lazily so Ctrl-C is one line
# Packages from the top floor down (docs/architecture.md); single modules sit where
# they are used.
FLOORS = ("cli", "bench", "tune", "api", "registry", "fan", "parallel", "cone", "distributed", "io",
          "stream", "phantoms", "stages", "geometry", "cl", "checks")
GEOMETRIES = ("parallel", "cone")  # side by side: neither imports the other


def reaches(packages: dict, start: str) -> set:
    """The packages ``start`` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for b in packages.get(todo.pop(), ()):
            if b not in seen:
                seen.add(b)
                todo.append(b)
    return seen


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path):
    """``(target module, names, inside a function)`` of each pybp import in ``path``."""
    tree = ast.parse(path.read_text())
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    inner = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner.update(id(n) for n in ast.walk(node) if n is not node)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base.split(".")[0] != "pybp":
                continue
            for alias in node.names:
                target = f"{base}.{alias.name}"
                is_module = (ROOT / (target.replace(".", "/") + ".py")).is_file() or \
                    (ROOT / target.replace(".", "/") / "__init__.py").is_file()
                yield (target if is_module else base), \
                    [] if is_module else [alias.name], id(node) in inner
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "pybp":
                    yield alias.name, [], id(node) in inner


def graph():
    """``(edges, problems)``: module -> set of modules it imports; lines of problems."""
    edges, problems = {}, []
    for path in sorted((ROOT / "pybp").rglob("*.py")):
        here = module_name(path)
        edges.setdefault(here, set())
        for target, names, inner in imports(path):
            if target == "pybp" and names == ["__version__"]:
                continue  # the version string, not a module
            edges[here].add(target)
            private = [n for n in names if n.startswith("_")]
            if private:
                problems.append(f"{here} imports private {', '.join(private)} from {target}")
            if inner and here not in ALLOWED_INNER:
                problems.append(f"{here} imports {target} inside a function")
    return edges, problems


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "pybp"


def circles(edges) -> list:
    """Each strongly connected group of more than one node (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def package_edges(edges) -> dict:
    packages = {}
    for source, targets in edges.items():
        a = package_of(source)
        for target in targets:
            b = package_of(target)
            if a != b and b != "pybp":
                packages.setdefault(a, set()).add(b)
    return packages


def problems() -> list:
    edges, found = graph()
    found += [f"module circle: {' <-> '.join(c)}" for c in circles(edges)]
    found += [f"package circle: {' <-> '.join(c)}" for c in circles(package_edges(edges))]
    return found


def mermaid(edges) -> str:
    """The package graph, top floor first; an arrow where a package imports another
    (those implied by a longer way down are left out, as in a Hasse diagram)."""
    packages = package_edges(edges)
    names = sorted(set(packages) | {b for v in packages.values() for b in v},
                   key=lambda n: FLOORS.index(n) if n in FLOORS else len(FLOORS))

    def below(a, seen=None):
        seen = set() if seen is None else seen
        for b in packages.get(a, ()):
            if b not in seen:
                seen.add(b)
                below(b, seen)
        return seen

    lines = ["flowchart TD"]
    for a in names:
        direct = packages.get(a, set())
        implied = set().union(*(below(b) for b in direct)) if direct else set()
        for b in sorted(direct - implied, key=names.index):
            lines.append(f"    {a} --> {b}")
    return "\n".join(lines)


if __name__ == "__main__":
    found = problems()
    print("\n".join(found) if found else "no circles, no private names across modules, "
          "no imports inside functions")
    print()
    print(mermaid(graph()[0]))
    sys.exit(1 if found else 0)
