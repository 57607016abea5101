"""No import cycles between packages, and dependencies point one way: `cli -> flows -> kernel`
(DESIGN §2, STYLE "Structure").

An AST walk over every module under kernel/, flows/ and cli/ collects its imports of `aos.*`,
at module level and inside functions alike (a deferred import still ties the two packages
together; deferring it only hides the cycle from the interpreter). The nodes of the graph are
the concept packages DESIGN §2 names, one level under a root (`aos.kernel.world`,
`aos.flows.define`), with everything under them (`aos.kernel.world.cells`,
`aos.flows.define.playbook.compile`); a loose module directly in a root (`aos.kernel.cbor`)
is a node of its own, the root being a namespace of separate concepts rather than one. A
cycle is reported as the path of packages with, for each edge, the first import that makes
it (file:line).
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_ROOTS = {"kernel": "aos.kernel", "flows": "aos.flows", "cli": "aos.cli", "api": "aos"}
# The layers, lowest first: a module may import its own layer and the ones below it. The
# public API (`api/`, the package `aos` itself) is the top.
LAYERS = ("aos.kernel", "aos.flows", "aos.cli", "aos")

Edge = tuple[str, str]


def _module_name(path: Path, root: Path) -> str:
    folder = path.relative_to(root).parts[0]
    parts = list(path.relative_to(root / folder).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([SOURCE_ROOTS[folder], *parts])


def _node(module: str) -> str:
    """The concept package a module belongs to: the first level under its root (a loose
    module of a root is its own node, and so is a root's `__init__`)."""
    parts = module.split(".")
    return ".".join(parts[:3])


def _resolve(name: str, modules: set[str]) -> str | None:
    """The longest known module a dotted import name starts with (`aos.kernel.world.World`
    -> `aos.kernel.world`), or None for a name outside the tree."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(tree: ast.Module) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                yield f"{node.module}.{alias.name}", node.lineno


def _sources(root: Path) -> dict[str, Path]:
    found = {}
    for folder in SOURCE_ROOTS:
        for path in sorted((root / folder).rglob("*.py")):
            found[_module_name(path, root)] = path
    return found


def import_graph(root: Path = ROOT) -> dict[Edge, str]:
    """Every edge between two different nodes, with the first import that makes it."""
    sources = _sources(root)
    modules = set(sources)
    edges: dict[Edge, str] = {}
    for module, path in sources.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        source = _node(module)
        for name, line in _imports(tree):
            target = _resolve(name, modules)
            if target is None:
                continue
            node = _node(target)
            if node != source:
                where = f"{path.relative_to(root).as_posix()}:{line}"
                edges.setdefault((source, node), where)
    return edges


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one node, each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _cycle_through(start: str, members: set[str], graph: dict[str, set[str]]) -> list[str]:
    """One shortest cycle from `start` back to it inside a component (breadth-first)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph.get(node, set()) & members):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if target not in previous:
                    previous[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start}")


def _rotated(cycle: list[str]) -> tuple[str, ...]:
    """A cycle's nodes starting at its least one, so that rotations compare equal."""
    nodes = cycle[:-1]
    first = nodes.index(min(nodes))
    return tuple(nodes[first:] + nodes[:first])


def cycles(root: Path = ROOT) -> list[str]:
    """The cycles between packages, as `a -> b (file:line); b -> a (file:line)`: for every
    package in a strongly connected component, one shortest cycle through it (a component
    of n packages can hold exponentially many cycles; these name every package and edge
    a reader must cut)."""
    edges = import_graph(root)
    graph: dict[str, set[str]] = {}
    for source, target in edges:
        graph.setdefault(source, set()).add(target)
    seen: set[tuple[str, ...]] = set()
    described = []
    for component in _strongly_connected(graph):
        for start in component:
            path = _cycle_through(start, set(component), graph)
            if _rotated(path) in seen:
                continue
            seen.add(_rotated(path))
            hops = [f"{a} -> {b} ({edges[a, b]})" for a, b in itertools.pairwise(path)]
            described.append("; ".join(hops))
    return described


def _layer(node: str) -> int:
    return next(
        i for i, layer in enumerate(LAYERS) if node == layer or node.startswith(layer + ".")
    )


def upward_imports(root: Path = ROOT) -> list[str]:
    """Imports from a lower layer into a higher one (kernel importing flows or cli, flows
    importing cli)."""
    return sorted(
        f"{source} -> {target} ({where})"
        for (source, target), where in import_graph(root).items()
        if _layer(target) > _layer(source)
    )


def test_no_import_cycles_between_packages() -> None:
    found = cycles()
    assert not found, "import cycles between packages:\n" + "\n".join(found)


def test_dependencies_point_from_cli_to_flows_to_kernel() -> None:
    found = upward_imports()
    assert not found, "imports against cli -> flows -> kernel:\n" + "\n".join(found)


def _tree(root: Path, files: dict[str, str]) -> Path:
    """A source tree under `root`: the three roots' `__init__.py` and `files` (path -> text)."""
    for relative, text in {
        **{f"{folder}/__init__.py": "" for folder in SOURCE_ROOTS},
        **files,
    }.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_a_deferred_import_that_closes_a_cycle_is_named(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "kernel/a/__init__.py": "",
            "kernel/a/one.py": "from aos.kernel.b.two import thing\n",
            "kernel/b/__init__.py": "",
            "kernel/b/two.py": "def f():\n    import aos.kernel.a.one\n",
            "kernel/loose.py": "from aos.kernel.a import one\n",
        },
    )
    assert cycles(root) == [
        "aos.kernel.a -> aos.kernel.b (kernel/a/one.py:1); "
        "aos.kernel.b -> aos.kernel.a (kernel/b/two.py:2)"
    ]


def test_a_subpackage_belongs_to_its_concept_package(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "flows/define/__init__.py": "",
            "flows/define/core.py": "from aos.flows.define.front import compile\n",
            "flows/define/front/__init__.py": "",
            "flows/define/front/compile.py": "from aos.flows.tools.run import call\n",
            "flows/tools/__init__.py": "",
            "flows/tools/run.py": "from aos.flows.define.core import read\n",
        },
    )
    assert cycles(root) == [
        "aos.flows.define -> aos.flows.tools (flows/define/front/compile.py:1); "
        "aos.flows.tools -> aos.flows.define (flows/tools/run.py:1)"
    ]


def test_an_import_against_the_layers_is_named(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "flows/x.py": "",
            "kernel/y.py": "from aos.flows import x\n",
            "cli/z.py": "from aos.flows.x import thing\n",
        },
    )
    assert cycles(root) == []
    assert upward_imports(root) == ["aos.kernel.y -> aos.flows.x (kernel/y.py:1)"]
