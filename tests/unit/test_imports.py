"""Imports point down: what each part of the tree may not import, read from the source itself."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def imported_modules(package: str, root: Path = REPO) -> Iterator[tuple[Path, int, str]]:
    """Every module a package's files import (file, line, dotted name), at any depth of the file
    (a function's lazy import counts), relative imports resolved against the file's own package."""
    for path in sorted((root / package).rglob("*.py")):
        own_package = list(path.relative_to(root).parts[:-1])
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield path, node.lineno, alias.name
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = own_package[:len(own_package) - node.level + 1]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                yield path, node.lineno, module
                for alias in node.names:  # ``from apiserver import server`` imports apiserver.server
                    yield path, node.lineno, f"{module}.{alias.name}"


def offenders(package: str, forbidden: tuple[str, ...], root: Path = REPO) -> list[str]:
    return [f"{path.relative_to(root)}:{line} imports {module}"
            for path, line, module in imported_modules(package, root)
            if any(module == f or module.startswith(f + ".") for f in forbidden)]


def test_the_reconciler_imports_nothing_of_the_http_server() -> None:
    assert offenders("reconciler", ("apiserver.server", "apiserver.endpoints", "apiserver.__main__")) == []


SHIPPED = ("apiserver", "reconciler", "apiservice", "certs", "hack")  # the packages pyproject.toml installs


def test_nothing_that_is_installed_imports_the_kubernetes_client_which_only_tests_depend_on() -> None:
    """``kubernetes`` is in the test extra only: a production install does not have it."""
    assert [o for package in SHIPPED for o in offenders(package, ("kubernetes",))] == []


def test_the_import_check_finds_absolute_relative_and_lazy_imports(tmp_path: Path) -> None:
    (tmp_path / "reconciler" / "loop").mkdir(parents=True)
    (tmp_path / "reconciler" / "loop" / "queue.py").write_text(
        "import apiserver.server.app\n"
        "from apiserver import endpoints\n"
        "def later():\n"
        "    from apiserver.machinery import errors\n"
        "    from ..manager import Manager\n"
        "    import kubernetes.client as k8s\n")
    assert offenders("reconciler", ("apiserver.server", "apiserver.endpoints", "apiserver.machinery",
                                    "reconciler.manager", "kubernetes"), tmp_path) == [
        "reconciler/loop/queue.py:1 imports apiserver.server.app",
        "reconciler/loop/queue.py:2 imports apiserver.endpoints",
        "reconciler/loop/queue.py:4 imports apiserver.machinery",
        "reconciler/loop/queue.py:4 imports apiserver.machinery.errors",
        "reconciler/loop/queue.py:5 imports reconciler.manager",
        "reconciler/loop/queue.py:5 imports reconciler.manager.Manager",
        "reconciler/loop/queue.py:6 imports kubernetes.client",
    ]
