"""Dependencies point down: the import graph of assembler/ (read with ast, nothing imported)
has no cycle, and no module imports from a higher layer than its own. The order is held here
only (LAYERS; docs/DESIGN.md describes it without repeating it); a new top-level package or
module must be placed in it here.

Counted: every ``import assembler...`` / ``from assembler... import`` at run time, inside
functions too (a lazy import is still a dependency). Not counted: imports under ``if
TYPE_CHECKING:`` (types only), and a package's ``__init__`` importing its own submodules
(what a package does to expose them; each submodule imports its package anyway).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "assembler"

# Lowest first. Names in one tuple share a layer: they may import each other (without a cycle).
LAYERS: list[tuple[str, ...]] = [
    # the package root (__version__), exit codes, the machine, JSON data files
    ("assembler", "errors", "system", "jsonfile"),
    ("fsutil",),  # atomic writes, locks on files
    ("report",),  # consoles and the JSON emitter
    ("cache",),  # where shared state lives
    ("store",),  # the artifact store CI runners share (file://, s3://)
    ("series",),  # pure formats: series files, DEP-3 headers, patch status
    ("manifest",),  # deps.toml
    ("workspace",),  # a workspace: manifest, state dir, lock, pending rebases
    ("git",),  # the one git layer: views, scratch, mirrors, checkouts, export
    ("toolchain",),  # CUDA, torch environments, compilers
    ("audit",),  # ELF reading and the one gate
    ("wheel",),  # artifacts, the merged wheel, SBOM, sizes
    ("verify",),  # loading wheels on several torch versions
    ("builder",),  # builds, the pipeline, build evidence
    ("check",),  # source-level Stable-ABI check (compiles, maps results through audit.gate)
    ("migration",),  # helping write a migration: assess (the inventory of LibTorch uses), review (the token criterion)
    ("upstreaming",),  # patch status, rebase
    ("cli",),  # argument parsing and printing only
    ("__main__",),
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    """``assembler.git.process`` -> ``git``; ``assembler.cache`` -> ``cache``; ``assembler`` -> ``assembler``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def runtime_imports(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """(module, line) of every assembler import outside ``if TYPE_CHECKING:`` blocks."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield from runtime_imports(child)
            continue
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names if alias.name.split(".")[0] == "assembler")
        elif (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
              and node.module.split(".")[0] == "assembler"):
            yield node.module, node.lineno
            # `from assembler.audit import gate` imports the module assembler.audit.gate
            yield from ((f"{node.module}.{alias.name}", node.lineno) for alias in node.names)
        yield from runtime_imports(node)


def type_checking_imports(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """(module, line) of every assembler import inside ``if TYPE_CHECKING:`` blocks."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from runtime_imports(ast.Module(body=[child], type_ignores=[]))


def import_graph(within_package_types: bool = False) -> tuple[dict[str, set[str]], dict[tuple[str, str], int]]:
    """module -> modules it imports (assembler's own only), and where each edge is written.
    ``within_package_types``: also the ``if TYPE_CHECKING:`` imports between modules of one
    top-level package (a package's own modules must not need each other both ways, even for
    types: the shared types belong one module lower)."""
    files = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {module: set() for module in files}
    lines: dict[tuple[str, str], int] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        found = list(runtime_imports(tree))
        if within_package_types:
            found += [(target, line) for target, line in type_checking_imports(tree)
                      if layer_of(target) == layer_of(module)]
        for target, line in found:
            if target not in files:
                continue  # a name imported from a module (its module is listed as well)
            if target == module or (is_package and target.startswith(module + ".")):
                continue
            graph[module].add(target)
            lines.setdefault((module, target), line)
    return graph, lines


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_top_level_package_has_a_layer() -> None:
    names = {layer_of(module_name(path)) for path in PACKAGE.rglob("*.py")}
    assert not names - set(RANK), f"place these in LAYERS (tests/test_layers.py): {sorted(names - set(RANK))}"


def test_no_import_cycle() -> None:
    graph, _ = import_graph()
    assert cycles(graph) == []


def test_no_import_cycle_within_a_package_counting_type_imports() -> None:
    """A TYPE_CHECKING import is not run, but a package whose modules import each other both
    ways, one of them for types, has its shared types in the wrong module (#22: builder.builder
    and its backends, audit.gate and audit.model)."""
    graph, _ = import_graph(within_package_types=True)
    assert cycles(graph) == []


def test_no_import_from_a_higher_layer() -> None:
    graph, lines = import_graph()
    upward = sorted(
        f"{module} (line {lines[module, target]}) imports {target}: {layer_of(module)} is below {layer_of(target)}"
        for module, targets in graph.items() for target in targets
        if RANK.get(layer_of(target), -1) > RANK.get(layer_of(module), len(LAYERS))
    )
    assert upward == []


def test_the_checker_sees_cycles_and_upward_imports() -> None:
    """The checks above can fail: a cycle and an upward edge in a made-up graph are found."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import assembler.cli\n"
                     "def f():\n    from assembler.upstreaming import rebase\n")
    assert [name for name, _ in runtime_imports(tree)] == ["assembler.upstreaming", "assembler.upstreaming.rebase"]
    assert [name for name, _ in type_checking_imports(tree)] == ["assembler.cli"]
    assert RANK[layer_of("assembler.git.sync")] < RANK[layer_of("assembler.upstreaming.journal")]
