"""Every command the docs show as runnable runs as shown, on a playground like ``make up``'s.

A docs page marks a shell block runnable with ``<!-- runnable -->`` on the line before its fence.
Each such block runs with bash (``-e -o pipefail``) in a directory laid out as a checkout after
``make up``: ``.local/kubeconfig`` is the playground host's admin, ``.local/bin`` the binaries,
``examples/`` the examples.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hack.harness import REPO, wait_until
from hack.stack import Stack
from tests.conftest import Kubectl

RUNNABLE = re.compile(r"^<!-- runnable -->\n```(?:sh|bash)\n(.*?)^```", re.S | re.M)
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def runnable_blocks() -> list[tuple[str, str]]:
    """(id, script) of every block marked runnable, in page order."""
    blocks: list[tuple[str, str]] = []
    for page in PAGES:
        text = page.read_text()
        for n, match in enumerate(RUNNABLE.finditer(text), 1):
            line = text.count("\n", 0, match.start()) + 2
            blocks.append((f"{page.relative_to(REPO)}:{line}#{n}", match.group(1)))
    return blocks


BLOCKS = runnable_blocks()


def test_the_docs_mark_the_playground_walkthroughs_runnable() -> None:
    """The marker is read where it is written: a page that loses its markers loses its checks."""
    pages = {block_id.split(":", 1)[0] for block_id, _ in BLOCKS}
    assert {"docs/playground.md", "docs/promotion.md", "docs/lifecycle.md", "docs/shared-slices.md"} <= pages
    assert all(script.startswith("export KUBECONFIG=$PWD/.local/kubeconfig") for _, script in BLOCKS)


@pytest.fixture(scope="module")
def checkout(process_host: Stack, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory that looks like a checkout after ``make up``, pointed at the test playground."""
    root = tmp_path_factory.mktemp("docs")
    (root / ".local").mkdir()
    (root / ".local" / "kubeconfig").symlink_to(process_host.kubeconfig)
    bin_dir = root / ".local" / "bin"  # as `make up` leaves it: the binaries, and the kubectl plugin beside them
    bin_dir.mkdir()
    for tool in (REPO / ".local" / "bin").iterdir():
        (bin_dir / tool.name).symlink_to(tool)
    if not (bin_dir / "kubectl-vc").exists():
        (bin_dir / "kubectl-vc").symlink_to(Path(sys.executable).parent / "kubectl-vc")
    (root / "examples").symlink_to(REPO / "examples")
    # A module before this one may have registered the APIService again: the host's aggregator merges its
    # OpenAPI (what `kubectl explain` reads) a few seconds after the APIService is Available.
    kubectl = Kubectl(process_host.kubeconfig, host_namespaces=True)
    wait_until(lambda: kubectl.run("explain", "vc.spec", check=False).returncode == 0, 60,
               "the aggregated OpenAPI to include VirtualCluster", interval=1)
    return root


@pytest.mark.parametrize("script", [script for _, script in BLOCKS], ids=[block_id for block_id, _ in BLOCKS])
def test_a_runnable_docs_block_runs_as_shown(checkout: Path, script: str) -> None:
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=checkout,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
