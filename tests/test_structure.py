"""The package structure: imports point down the layers, no import circle between the modules of one package, and
no module over 600 lines.

Layers (DESIGN.md, docs/layout.md): every top-level package or module of src/precisionlab has a rank in LAYERS,
bottom first, and a module may import its own package, those of its rank and those below, never one above. Inside
one rank, no circle between packages (eval <- ptq <- search may point one way only). The top-level utility
modules (errors, json_input, _atomic, parallel, peers: they import nothing of precisionlab) sit just above
`results`, so every layer may use them. `precisionlab/__init__.py` is the facade: it may import what it
re-exports from any layer, and a module that imports `precisionlab` itself (`import precisionlab`,
`from precisionlab import __version__`) counts as importing the highest layer the facade imports.

Circles: every package under src/precisionlab (the top-level one included) is a graph: its nodes are the
modules directly in it (`__init__` among them), and A -> B where A's source imports B anywhere: at
the top, inside a function, or under `if TYPE_CHECKING:` (the source is read with ast, never
imported, so every import counts; relative imports are resolved). `from P import name` points at the
module P.name when there is one, else at P itself. Importing P.X does not count as importing P's
`__init__` (Python runs the parent package first; that is not a circle of this package's making).
Any strongly connected part of more than one node is a circle. A subpackage is one node of its parent
(every module in it, at any depth, stands for it there), so a module that imports its own subpackage
while the subpackage imports it back is a circle of the parent; the subpackage is also tested by
itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "precisionlab"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package(path: Path) -> bool:
    return path.is_file() and path.name == "__init__.py"


def modules() -> dict[str, Path]:
    """Every module under src/precisionlab by dotted name (a package by its `__init__.py`)."""
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


_IMPORTS: dict[tuple[Path, str, int], set[str]] = {}


def imported_names(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The modules (dotted names) that the source at `path` imports anywhere in its tree (each file parsed once
    per module map: the layer and circle tests all read the same tree)."""
    key = (path, name, id(known))
    if key not in _IMPORTS:
        _IMPORTS[key] = _parse_imports(path, name, known)
    return _IMPORTS[key]


def _parse_imports(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    package = name if is_package(path) else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                found.add(candidate if candidate in known else target)
    return {n for n in found if n == "precisionlab" or n.startswith("precisionlab.")}


def packages(known: dict[str, Path]) -> list[str]:
    return [name for name, path in known.items() if is_package(path)]


def node_in(package: str, module: str, known: dict[str, Path]) -> str | None:
    """The node of `package` that `module` belongs to: the module itself when it lies directly in the package
    (its `__init__` included), the subpackage when it lies in one (a subpackage is one node of its parent, so
    a circle through a subpackage counts), else None."""
    if module == package:
        return package
    if not module.startswith(package + "."):
        return None
    first = module[len(package) + 1:].split(".")[0]
    node = f"{package}.{first}"
    return node if node in known else None


def graph(package: str, known: dict[str, Path]) -> dict[str, set[str]]:
    """Edges between the nodes of one package."""
    edges: dict[str, set[str]] = {}
    for name, path in known.items():
        source = node_in(package, name, known)
        if source is None:
            continue
        edges.setdefault(source, set())
        for target_module in imported_names(path, name, known):
            target = node_in(package, target_module, known)
            if target is not None and target != source:
                edges[source].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one node (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def path_through(edges: dict[str, set[str]], part: list[str]) -> str:
    """One cycle inside a strongly connected part, for the failure message."""
    members = set(part)
    start = part[0]
    trail = [start]
    seen = {start}
    node = start
    while True:
        nxt = sorted(n for n in edges[node] if n in members)
        back = [n for n in nxt if n == start]
        if back and len(trail) > 1:
            return " -> ".join([*trail, start])
        fresh = [n for n in nxt if n not in seen]
        if not fresh:
            return " -> ".join([*trail, nxt[0]]) if nxt else " -> ".join(trail)
        node = fresh[0]
        trail.append(node)
        seen.add(node)


KNOWN = modules()


@pytest.mark.parametrize("package", packages(KNOWN))
def test_no_import_circle_inside_a_package(package: str) -> None:
    edges = graph(package, KNOWN)
    found = circles(edges)
    assert not found, "import circles in " + package + ": " + "; ".join(path_through(edges, p) for p in found)


# --------------------------------------------------------------------------- the layers
LAYERS: tuple[tuple[str, ...], ...] = (
    ("results",),
    ("errors", "json_input", "_atomic", "parallel", "peers"),
    ("formats",),
    ("rounding",),
    ("quant",),
    ("hardware",),
    ("numerics", "gemm", "training", "capacity", "advise"),
    ("interop",),
    ("models",),
    ("eval", "ptq", "search"),
    ("qat",),
    ("export",),
    ("labs",),
    ("report",),
    ("cli",),
)
"""Bottom first (module docstring): a module imports its own rank and those below."""

TOP = "precisionlab"


def layer_of(module: str) -> str | None:
    """The top-level package or module of `module` under precisionlab (None: the facade, precisionlab itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def upward_imports(known: dict[str, Path], layers: tuple[tuple[str, ...], ...] = LAYERS) -> list[str]:
    """Every import that points above its module's layer, and every top-level name without a layer, in words."""
    rank = {name: i for i, names in enumerate(layers) for name in names}
    facade = max((rank.get(layer_of(t) or "", -1) for t in imported_names(known[TOP], TOP, known)), default=-1)
    found = []
    for name, path in known.items():
        me = layer_of(name)
        if me is None:
            continue
        if me not in rank:
            found.append(f"{name}: {me} has no layer (give it a rank in LAYERS, DESIGN.md and docs/layout.md)")
            continue
        for target in sorted(imported_names(path, name, known)):
            other = layer_of(target)
            above = facade if other is None else rank.get(other, -1)
            if other != me and above > rank[me]:
                what = "the facade precisionlab/__init__.py, which imports" if other is None else "layer"
                found.append(f"{name} imports {target}: {what} {layers[above]} sits above {me}")
    return found


def rank_graph(known: dict[str, Path], names: tuple[str, ...]) -> dict[str, set[str]]:
    """Edges between the top-level packages of one rank (A -> B: a module of A imports one of B)."""
    edges: dict[str, set[str]] = {name: set() for name in names}
    for module, path in known.items():
        me = layer_of(module)
        if me not in edges:
            continue
        for target in imported_names(path, module, known):
            other = layer_of(target)
            if other in edges and other != me:
                edges[me].add(other)
    return edges


def test_imports_point_down_the_layers() -> None:
    found = upward_imports(KNOWN)
    assert not found, "imports against the layers (DESIGN.md):\n" + "\n".join(found)


@pytest.mark.parametrize("names", [names for names in LAYERS if len(names) > 1], ids="+".join)
def test_no_import_circle_between_the_packages_of_one_layer(names: tuple[str, ...]) -> None:
    edges = rank_graph(KNOWN, names)
    found = circles(edges)
    assert not found, "import circles between " + ", ".join(names) + ": " + \
        "; ".join(path_through(edges, p) for p in found)


def test_every_top_level_name_has_a_layer() -> None:
    present = {layer_of(name) for name in KNOWN} - {None}
    placed = {name for names in LAYERS for name in names}
    assert present <= placed, f"without a layer: {sorted(present - placed)}"
    assert placed <= present, f"layers naming nothing: {sorted(placed - present)}"


# --------------------------------------------------------------------------- the checker itself
def write(tmp: Path, files: dict[str, str]) -> dict[str, Path]:
    for relative, text in files.items():
        path = tmp / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return {module_name_in(tmp, path): path for path in sorted(tmp.rglob("*.py"))}


def module_name_in(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_checker_finds_circles_through_functions_type_checking_and_relative_imports(tmp_path: Path) -> None:
    known = write(tmp_path, {
        "precisionlab/__init__.py": "",
        "precisionlab/pkg/__init__.py": "from precisionlab.pkg.a import thing\n",
        "precisionlab/pkg/a.py": "def f():\n    from precisionlab.pkg import b\n",
        "precisionlab/pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\n",
        "precisionlab/pkg/c.py": "import precisionlab.pkg.a\n",
        "precisionlab/pkg/d.py": "from precisionlab.pkg.sub.e import E\nfrom precisionlab.pkg import thing\n",
        "precisionlab/pkg/sub/__init__.py": "",
        "precisionlab/pkg/sub/e.py": "from ..d import x\nfrom . import g\n",
        "precisionlab/pkg/sub/g.py": "from precisionlab.pkg.sub import e\n",
        "precisionlab/pkg/f.py": "from precisionlab.pkg.a import thing\nfrom precisionlab import other\n",
    })
    edges = graph("precisionlab.pkg", known)
    found = circles(edges)
    # a -> b (in a function), b -> c (TYPE_CHECKING, relative), c -> a (plain import); d -> __init__ -> a
    # points into the circle only; f likewise; d <-> sub.e is a circle through the subpackage (one node)
    assert found == [["precisionlab.pkg.a", "precisionlab.pkg.b", "precisionlab.pkg.c"],
                     ["precisionlab.pkg.d", "precisionlab.pkg.sub"]]
    assert path_through(edges, found[0]).replace("precisionlab.pkg.", "") == "a -> b -> c -> a"
    assert edges["precisionlab.pkg.d"] == {"precisionlab.pkg", "precisionlab.pkg.sub"}
    assert circles(graph("precisionlab.pkg.sub", known)) == [["precisionlab.pkg.sub.e", "precisionlab.pkg.sub.g"]]
    assert not circles(graph("precisionlab", known))


def test_the_layer_check_finds_upward_imports_through_functions_type_checking_relative_and_the_facade(
        tmp_path: Path) -> None:
    known = write(tmp_path, {
        "precisionlab/__init__.py": "from precisionlab.mid import thing\n",
        "precisionlab/base.py": "def f():\n    from precisionlab.mid import x\n",
        "precisionlab/mid/__init__.py": "",
        "precisionlab/mid/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..top.b import B\n",
        "precisionlab/mid/c.py": "from precisionlab import base\nfrom . import a\n",
        "precisionlab/low/__init__.py": "import precisionlab\n",
        "precisionlab/top/__init__.py": "",
        "precisionlab/top/b.py": "from precisionlab.mid.a import A\nfrom precisionlab import __version__\n",
        "precisionlab/side.py": "from precisionlab.base import f\n",
    })
    layers = (("base",), ("low",), ("mid",), ("top",))
    found = upward_imports(known, layers)
    # base -> mid (in a function); mid.a -> top.b (TYPE_CHECKING, relative); low -> the facade (it imports mid);
    # side has no layer; c -> base (down), c -> a (its own package), top.b -> mid and the facade: all allowed
    assert found == [
        "precisionlab.base imports precisionlab.mid: layer ('mid',) sits above base",
        "precisionlab.low imports precisionlab: the facade precisionlab/__init__.py, which imports ('mid',) sits "
        "above low",
        "precisionlab.mid.a imports precisionlab.top.b: layer ('top',) sits above mid",
        "precisionlab.side: side has no layer (give it a rank in LAYERS, DESIGN.md and docs/layout.md)",
    ]


def test_the_layer_check_finds_a_circle_inside_one_rank(tmp_path: Path) -> None:
    known = write(tmp_path, {
        "precisionlab/__init__.py": "",
        "precisionlab/p/__init__.py": "",
        "precisionlab/p/x.py": "def f():\n    from precisionlab.q.y import g\n",
        "precisionlab/q/__init__.py": "",
        "precisionlab/q/y.py": "from precisionlab.p import x\n",
        "precisionlab/r.py": "from precisionlab.p.x import f\n",
    })
    assert circles(rank_graph(known, ("p", "q", "r"))) == [["p", "q"]]  # r -> p points into it only
    assert not upward_imports(known, (("p", "q", "r"),))  # one rank: no import is upward


# --------------------------------------------------------------------------- one job per module
MAX_LINES = 600
"""A module longer than this does several jobs (issue: modules with one job each): split it by job."""


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_no_module_is_longer_than_the_limit(name: str) -> None:
    lines = len(KNOWN[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{KNOWN[name].relative_to(SRC)}: {lines} lines (at most {MAX_LINES}): split it by job"
