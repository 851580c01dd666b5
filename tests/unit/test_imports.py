"""Imports point down: what each part of the tree may not import, read from the source itself.

One test per rule of the layout in ARCHITECTURE.md: ``server → endpoints → registry → storage → etcd``,
with ``machinery``, ``transport``, ``apis`` and ``kubeclient`` beneath them all, and the reconciler's
``manager → controlplane → nodes → runtime`` beside the server, wired to it in ``apiserver/__main__.py``
alone. Where the code does something the layout does not foresee, the test's docstring says what the
rule allows and why."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROJECT = ("apiserver", "reconciler", "apiservice", "certs", "hack", "bench", "tests")  # the tree's own top levels


def imported_modules(package: str, root: Path = REPO) -> Iterator[tuple[Path, int, str]]:
    """Every module a package's files import (file, line, dotted name), at any depth of the file
    (a function's lazy import counts), relative imports resolved against the file's own package."""
    folder = root / package.replace(".", "/")
    assert folder.is_dir(), f"{folder} is not a folder of the tree: a rule about it would read nothing"
    for path in sorted(folder.rglob("*.py")):
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


def _under(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _above(module: str, prefixes: Iterable[str]) -> bool:
    """``module`` is a parent package of one of ``prefixes``: importing anything under it runs it anyway
    (``from apiserver.storage import interface`` names ``apiserver.storage``, then the interface)."""
    return any(p.startswith(module + ".") for p in prefixes)


def offenders(package: str, forbidden: tuple[str, ...], root: Path = REPO, *, unless: tuple[str, ...] = ()) -> list[str]:
    """The imports of ``package`` under ``forbidden``, but for those under ``unless``."""
    return [f"{path.relative_to(root)}:{line} imports {module}"
            for path, line, module in imported_modules(package, root)
            if _under(module, forbidden) and not _under(module, unless) and not _above(module, unless)]


def outside(package: str, allowed: tuple[str, ...], root: Path = REPO) -> list[str]:
    """The imports of the project's own modules by ``package`` that are neither its own nor under ``allowed``."""
    own = (package, *allowed)
    return [f"{path.relative_to(root)}:{line} imports {module}"
            for path, line, module in imported_modules(package, root)
            if module.split(".")[0] in PROJECT and not _under(module, own) and not _above(module, own)]


# -- the apiserver's stack: server → endpoints → registry → storage → etcd --------------------------

def test_storage_imports_nothing_of_the_registry_the_endpoints_or_the_server() -> None:
    """Nor of auth: storage keeps objects and knows no request and no user."""
    assert offenders("apiserver.storage", ("apiserver.registry", "apiserver.endpoints", "apiserver.server",
                                           "apiserver.auth", "apiserver.__main__")) == []


def test_the_registry_imports_nothing_of_the_endpoints_or_the_server() -> None:
    assert offenders("apiserver.registry", ("apiserver.endpoints", "apiserver.server", "apiserver.__main__")) == []


def test_the_registry_never_sees_the_watch_cache() -> None:
    """Whether a read is served from the cache or from etcd is decided once, below the registry, by
    ``storage.delegator``, whose store the server hands to the registry."""
    assert offenders("apiserver.registry", ("apiserver.storage.cacher", "apiserver.storage.delegator")) == []


def test_the_endpoints_import_nothing_of_the_server() -> None:
    assert offenders("apiserver.endpoints", ("apiserver.server", "apiserver.__main__")) == []


def test_the_endpoints_reach_storage_only_through_the_registry() -> None:
    """An endpoint asks the registry. Of storage it names only ``storage.interface``, the types the
    registry's answers are made of (the Entry a get returns, the Events of a Watch), as kube's handlers
    name apimachinery's watch types; nothing of etcd, the cache or the encrypted secrets."""
    assert offenders("apiserver.endpoints", ("apiserver.storage", "apiserver.etcd"),
                     unless=("apiserver.storage.interface",)) == []


def test_the_etcd_client_imports_nothing_of_the_project_but_machinery_and_transport() -> None:
    """It is the bottom of the data path: it knows nothing that is stored through it (not even the
    resource facts of ``apis``), and speaks gRPC with the transport's HTTP/2 frames and HPACK."""
    assert outside("apiserver.etcd", ("apiserver.machinery", "apiserver.transport")) == []


def test_auth_imports_nothing_of_the_endpoints_the_registry_or_storage() -> None:
    """Nor of the server or etcd: who asks, and whether they may, is decided from the request and the
    host (kubeclient), never from what is stored."""
    assert offenders("apiserver.auth", ("apiserver.endpoints", "apiserver.registry", "apiserver.storage",
                                        "apiserver.etcd", "apiserver.server", "apiserver.__main__")) == []


# -- the layers everything may use ----------------------------------------------------------------

def test_machinery_imports_nothing_of_the_project_but_machinery() -> None:
    """The leaf: not even ``certs`` or the ``apiserver`` package's own names."""
    assert outside("apiserver.machinery", ()) == []


def test_transport_imports_nothing_of_the_project_but_machinery() -> None:
    """HTTP/2's frames, HPACK and the HTTP/2 serving end: bytes, not resources."""
    assert outside("apiserver.transport", ("apiserver.machinery",)) == []


def test_apis_import_nothing_of_the_project_but_machinery() -> None:
    assert outside("apiserver.apis", ("apiserver.machinery",)) == []


def test_the_kube_client_imports_nothing_of_the_project_but_machinery_and_apis() -> None:
    """It needs no transport of its own: it speaks HTTP/1.1 through aiohttp."""
    assert outside("apiserver.kubeclient", ("apiserver.machinery", "apiserver.apis")) == []


def test_certs_import_nothing_of_the_project() -> None:
    """The PKI is a leaf beside machinery (not foreseen by the layout): storage keeps tenant PKIs,
    endpoints mint from them, the reconciler, the node agent and apiservice make certificates."""
    assert outside("certs", ()) == []


# -- the reconciler -------------------------------------------------------------------------------

def test_the_reconciler_imports_nothing_of_the_http_server() -> None:
    assert offenders("reconciler", ("apiserver.server", "apiserver.endpoints", "apiserver.__main__")) == []


def test_the_node_agent_imports_nothing_of_the_apiserver_but_machinery() -> None:
    """It runs on every host node, a program of its own. Beside ``apiserver.machinery`` it may use the
    leaves ``certs`` (its TLS) and ``reconciler.fileio`` (atomic writes); nothing else of the reconciler."""
    assert outside("reconciler.nodeagent", ("apiserver.machinery", "certs", "reconciler.fileio")) == []


def test_the_control_plane_imports_nothing_of_the_manager() -> None:
    assert offenders("reconciler.controlplane", ("reconciler.manager",)) == []


def test_node_promotion_imports_nothing_of_the_control_plane_or_the_manager() -> None:
    assert offenders("reconciler.nodes", ("reconciler.controlplane", "reconciler.manager")) == []


def test_the_runtime_imports_nothing_of_node_promotion_the_control_plane_or_the_manager() -> None:
    assert offenders("reconciler.runtime", ("reconciler.nodes", "reconciler.controlplane", "reconciler.manager")) == []


def test_the_loop_imports_nothing_of_what_it_runs() -> None:
    """The workqueue, the informer and leader election run any controller: they know none."""
    assert offenders("reconciler.loop", ("reconciler.controlplane", "reconciler.nodes", "reconciler.runtime",
                                         "reconciler.manager")) == []


# -- the whole ------------------------------------------------------------------------------------

def test_only_the_composition_root_imports_the_reconciler_from_the_apiserver() -> None:
    """``apiserver/__main__.py`` wires the reconciler in; nothing else of the apiserver knows it."""
    root = "apiserver/__main__.py:"
    assert [o for o in offenders("apiserver", ("reconciler",)) if not o.startswith(root)] == []


# the packages pyproject.toml installs (and the vc-apiserver image holds: hack/images reads the same list)
SHIPPED = tuple(p.rstrip("*") for p in tomllib.loads((REPO / "pyproject.toml").read_text())
                ["tool"]["setuptools"]["packages"]["find"]["include"])


def test_the_wheel_ships_the_product_and_not_the_lab() -> None:
    """hack (the lab, the playground, the image builder), bench and tests run from a checkout."""
    assert set(SHIPPED) == {"apiserver", "reconciler", "apiservice", "certs"}


def test_nothing_that_serves_imports_hack_bench_or_tests() -> None:
    """hack, bench and tests sit on top and may import anything; nothing that is installed imports
    them, and hack, which the tests and bench use, imports neither."""
    assert [o for package in SHIPPED for o in offenders(package, ("hack", "bench", "tests"))] == []
    assert offenders("hack", ("bench", "tests")) == []


def test_nothing_that_is_installed_imports_the_kubernetes_client_which_only_tests_depend_on() -> None:
    """``kubernetes`` is in the test extra only: a production install does not have it."""
    assert [o for package in SHIPPED for o in offenders(package, ("kubernetes",))] == []


def _exists(parts: list[str], root: Path) -> bool:
    """A folder or a ``.py`` file of the tree names this dotted module."""
    where = root.joinpath(*parts)
    return where.is_dir() or where.with_suffix(".py").is_file()


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str:
    """A package is a module's first two dotted names: ``apiserver.storage``, ``reconciler.manager``."""
    return ".".join(module.split(".")[:2])


def package_cycles(tops: tuple[str, ...], root: Path = REPO) -> list[list[str]]:
    """The packages under ``tops`` that import each other in a loop, each loop as the imports that
    close it (one file and line per pair). An imported name resolves to the longest dotted prefix of
    it that is a file or a folder of the tree (``from apiserver import IMAGE`` is ``apiserver``)."""
    edges: dict[str, dict[str, str]] = {}
    for top in tops:
        for path, line, module in imported_modules(top, root):
            parts = module.split(".")
            while parts and not _exists(parts, root):
                parts.pop()
            if not parts or parts[0] not in tops:
                continue
            source, target = package_of(module_name(path, root)), package_of(".".join(parts))
            if source != target:
                edges.setdefault(source, {}).setdefault(target, f"{path.relative_to(root)}:{line} imports {module}")

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), {}):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reached = {package: reach(package) for package in edges}
    loops = {frozenset(p for p in reached if p in reached[q] and q in reached[p])
             for q in reached if q in reached[q]}
    return [[f"{a} -> {b}: {edges[a][b]}" for a in sorted(loop) for b in sorted(edges[a]) if b in loop]
            for loop in sorted(loops, key=sorted)]


def test_the_packages_of_the_apiserver_and_the_reconciler_import_each_other_in_no_cycle() -> None:
    assert package_cycles(("apiserver", "reconciler")) == []


# -- the checker itself ---------------------------------------------------------------------------

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


def test_an_allowed_list_passes_its_own_package_and_parents_and_finds_the_rest(tmp_path: Path) -> None:
    (tmp_path / "apiserver" / "endpoints").mkdir(parents=True)
    (tmp_path / "apiserver" / "endpoints" / "watch.py").write_text(
        "import json\n"
        "from apiserver.storage import interface\n"
        "from apiserver.storage.interface import Event\n"
        "from . import negotiation\n"
        "from apiserver.storage import secrets\n"
        "from apiserver import IMAGE\n"
        "from certs.pki import new_ca\n")
    assert offenders("apiserver.endpoints", ("apiserver.storage",), tmp_path,
                     unless=("apiserver.storage.interface",)) == [
        "apiserver/endpoints/watch.py:5 imports apiserver.storage.secrets",
    ]
    assert outside("apiserver.endpoints", ("apiserver.storage.interface", "certs"), tmp_path) == [
        "apiserver/endpoints/watch.py:5 imports apiserver.storage.secrets",
        "apiserver/endpoints/watch.py:6 imports apiserver.IMAGE",
    ]


def test_the_cycle_check_finds_packages_that_import_each_other_through_any_file(tmp_path: Path) -> None:
    for folder in ("reconciler/nodes", "reconciler/runtime", "reconciler/loop", "apiserver"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "__init__.py").write_text("IMAGE = 'x'\n")
    (tmp_path / "reconciler" / "nodes" / "promoter.py").write_text("from reconciler.runtime.base import Runtime\n")
    (tmp_path / "reconciler" / "runtime" / "base.py").write_text("from reconciler.loop import queue\n")
    (tmp_path / "reconciler" / "runtime" / "pods.py").write_text("from apiserver import IMAGE\n")
    (tmp_path / "reconciler" / "loop" / "queue.py").write_text("def later():\n    from ..nodes import promoter\n")
    assert package_cycles(("apiserver", "reconciler"), tmp_path) == [[
        "reconciler.loop -> reconciler.nodes: reconciler/loop/queue.py:2 imports reconciler.nodes",
        "reconciler.nodes -> reconciler.runtime: reconciler/nodes/promoter.py:1 imports reconciler.runtime.base",
        "reconciler.runtime -> reconciler.loop: reconciler/runtime/base.py:1 imports reconciler.loop",
    ]]
    (tmp_path / "reconciler" / "loop" / "queue.py").write_text("import apiserver\n")
    assert package_cycles(("apiserver", "reconciler"), tmp_path) == []
