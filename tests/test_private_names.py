"""No module of precisionlab uses another module's private name.

The rule, checked on the syntax tree of every module under src/precisionlab:

- a name is private when it starts with "_" and is not a dunder ("__version__", "__all__" are public);
- `from M import _name` (absolute or relative) is a violation when M is a precisionlab module or package;
- `alias._name` is a violation when `alias` is bound in that file to a precisionlab module, by
  `import M`, `import M as alias`, `from P import module` or `from . import module`; a dotted chain
  `precisionlab.quant.core._name` is followed to its module the same way;
- what a module does with its own private names is its business: only names reached through another
  module count. Private modules (precisionlab._atomic) are not names imported from a module and are
  allowed; third-party and standard-library private names are outside this rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(dotted: str, root: Path) -> bool:
    """True when `dotted` names a module or package in the tree under root."""
    base = root.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def absolute(node: ast.ImportFrom, current: str, is_package: bool) -> str:
    """The absolute module an ImportFrom reads from (relative levels resolved against `current`)."""
    if not node.level:
        return node.module or ""
    parts = current.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def dotted(node: ast.expr) -> str | None:
    """'a.b.c' for a Name / Attribute chain, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def private_uses(root: Path, package: str) -> list[str]:
    """Every use, in a module of `package` under root, of another module's private name: 'file:line: what'."""
    found: list[str] = []
    for path in sorted((root / package).rglob("*.py")):
        current = module_name(path, root)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        modules: dict[str, str] = {}  # local name -> the package module it is bound to
        where = f"{path.relative_to(root)}"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == package:
                        if alias.asname:
                            modules[alias.asname] = alias.name
                        else:
                            modules[alias.name.split(".")[0]] = alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                source = absolute(node, current, path.name == "__init__.py")
                if source.split(".")[0] != package or source == current:
                    continue
                for alias in node.names:
                    if is_private(alias.name):
                        found.append(f"{where}:{node.lineno}: from {source} import {alias.name}")
                    elif is_module(f"{source}.{alias.name}", root):
                        modules[alias.asname or alias.name] = f"{source}.{alias.name}"
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and is_private(node.attr):
                chain = dotted(node.value)
                if chain is None or chain.split(".")[0] not in modules:
                    continue
                head, *rest = chain.split(".")
                target = ".".join([modules[head], *rest])
                if is_module(target, root) and target != current:
                    found.append(f"{where}:{node.lineno}: {chain}.{node.attr} ({target})")
    return found


def test_the_checker_catches_each_kind_of_violation(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '1'\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "inner.py").write_text("_hidden = 1\npublic = 2\n\ndef _helper():\n    return 3\n")
    (pkg / "ok.py").write_text(
        "from pkg import __version__\n"          # a dunder: fine
        "from pkg.sub.inner import public\n"    # a public name: fine
        "import os\n"
        "_mine = os._exit\n"                     # stdlib private: outside the rule
        "def _own():\n    return _mine\n"        # own private names: fine
    )
    (pkg / "bad.py").write_text(
        "from pkg.sub.inner import _hidden\n"    # 1: from-import of a private name
        "from .sub import inner\n"               # binds a module...
        "import pkg.sub.inner as alias\n"
        "import pkg\n"
        "a = inner._helper()\n"                  # 2: ... whose private name is read
        "b = alias._hidden\n"                    # 3: through an `import ... as`
        "c = pkg.sub.inner._helper\n"            # 4: through a dotted chain
    )
    (pkg / "sub" / "rel.py").write_text("from .inner import _helper\n")  # 5: relative
    found = sorted(private_uses(tmp_path, "pkg"), key=lambda line: (line.split(":")[0], int(line.split(":")[1])))
    assert [line.split(":")[0:2] for line in found] == [
        ["pkg/bad.py", "1"], ["pkg/bad.py", "5"], ["pkg/bad.py", "6"], ["pkg/bad.py", "7"], ["pkg/sub/rel.py", "1"],
    ], found


def test_no_module_uses_another_modules_private_names() -> None:
    found = private_uses(SRC, "precisionlab")
    assert not found, "private names used across modules:\n" + "\n".join(found)
