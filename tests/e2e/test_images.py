"""The images for real: built (from the cache when nothing changed), imported into a throwaway
containerd with ``python -m hack.images import``'s code, and run there with ``ctr run``; a second
build from scratch gives the same digests."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.images import build as images
from reconciler import versions
from tests.support.containerd import Containerd

VC_IMAGE = "docker.io/library/vc-apiserver:0.1.0"  # as kubelets name vc-apiserver:0.1.0

pytestmark = pytest.mark.e2e
_ids = itertools.count()


@pytest.fixture(scope="module")
def built() -> dict[str, images.Built]:
    if os.geteuid() != 0:
        raise PermissionError("the images are built (chroot) and run (containerd) as root")
    return {b.recipe.name: b for b in images.build_all(say=lambda _: None)}


@pytest.fixture(scope="module")
def containerd(tmp_path_factory: pytest.TempPathFactory, built: dict[str, images.Built]) -> Iterator[Containerd]:
    c = Containerd(tmp_path_factory.mktemp("containerd"), sandbox_image=built["pause"].recipe.ref).start()
    try:
        images.import_images(list(built.values()), c.address, say=lambda _: None)
        yield c
    finally:
        c.stop()


def run(c: Containerd, ref: str, *command: str, flags: tuple[str, ...] = ()) -> str:
    proc = c.ctr("run", "--rm", *flags, ref, f"t{os.getpid()}-{next(_ids)}", *command, check=False)
    assert proc.returncode == 0, f"{ref} {command}: {proc.returncode} {proc.stdout} {proc.stderr}"
    return proc.stdout


def test_every_image_is_imported_under_its_upstream_name(containerd: Containerd,
                                                         built: dict[str, images.Built]) -> None:
    listed = set(containerd.ctr("images", "ls", "-q").stdout.split())
    assert {b.recipe.ref for b in built.values()} <= listed
    assert {"registry.k8s.io/pause:3.10.1", "docker.io/library/busybox:1.36", versions.ETCD_IMAGE,
            f"registry.k8s.io/kube-apiserver:{versions.KUBERNETES_VERSION}",
            f"registry.k8s.io/kube-proxy:{versions.KUBERNETES_VERSION}",
            f"registry.k8s.io/coredns/coredns:{versions.COREDNS_VERSION}", VC_IMAGE} <= listed
    for b in built.values():  # the digest containerd keeps is the one the build wrote
        assert b.info["digest"] in containerd.ctr("images", "ls").stdout, b.recipe.ref


def test_busybox_runs_a_shell(containerd: Containerd) -> None:
    out = run(containerd, "docker.io/library/busybox:1.36", "sh", "-c", "echo hello from $(busybox | head -1 | cut -d' ' -f1); id -u")
    assert out.splitlines() == ["hello from BusyBox", "0"]


def test_vc_apiserver_imports_its_server_and_node_agent_on_a_read_only_root(containerd: Containerd) -> None:
    out = run(containerd, VC_IMAGE, "python3", "-c",
              "import sys, apiserver.__main__, reconciler.nodeagent.__main__, importlib.metadata as m;"
              "print(sys.version_info[:2], m.version('vc-apiserver'), sys.dont_write_bytecode)",
              flags=("--read-only",))
    assert out.strip() == "(3, 11) 0.1.0 True"
    # what the manifests run: the console script (Deployment), `python -m` (the node agent), nsenter
    assert "usage: vc-apiserver" in run(containerd, VC_IMAGE, "vc-apiserver", "--help")
    assert "reconciler.nodeagent.staticpod" in run(containerd, VC_IMAGE, "python", "-m",
                                                    "reconciler.nodeagent.staticpod", "--help")
    assert "util-linux" in run(containerd, VC_IMAGE, "nsenter", "--version")
    # the pods runtime's snapshot and restore pods: `python -m reconciler.backup`, with etcd's etcdutl
    assert "{save,prune,restore}" in run(containerd, VC_IMAGE, "python", "-m", "reconciler.backup", "--help")
    assert f"etcdutl version: {versions.ETCD_VERSION.removeprefix('v')}" in run(
        containerd, VC_IMAGE, "etcdutl", "version")


def test_the_control_plane_images_run_their_binaries(containerd: Containerd) -> None:
    k8s = versions.KUBERNETES_VERSION
    assert f"Kubernetes {k8s}" in run(containerd, f"registry.k8s.io/kube-apiserver:{k8s}", "kube-apiserver", "--version")
    assert f"Kubernetes {k8s}" in run(containerd, f"registry.k8s.io/kube-proxy:{k8s}", "kube-proxy", "--version")
    assert "iptables v1.8" in run(containerd, f"registry.k8s.io/kube-proxy:{k8s}", "iptables", "--version")
    assert "conntrack v" in run(containerd, f"registry.k8s.io/kube-proxy:{k8s}", "conntrack", "--version")
    assert f"etcd Version: {versions.ETCD_VERSION[1:]}" in run(containerd, versions.ETCD_IMAGE, "etcd", "--version")
    assert f"CoreDNS-{versions.COREDNS_VERSION[1:]}" in run(
        containerd, f"registry.k8s.io/coredns/coredns:{versions.COREDNS_VERSION}", "/coredns", "-version")
    assert run(containerd, "registry.k8s.io/pause:3.10.1", "/pause", "-v").strip() == "pause 3.10.1"


def test_a_second_build_from_scratch_elsewhere_gives_the_same_digests(tmp_path: Path,
                                                                     built: dict[str, images.Built]) -> None:
    """The Debian-based images and the compiled one, rebuilt into an empty image cache (the
    downloaded packages reused) by an interpreter at another path, as a second checkout would:
    byte for byte what the cache holds."""
    names = ("pause", "busybox", "kube-proxy", "vc-apiserver")
    (tmp_path / "debs").symlink_to(images.CACHE / "debs")
    (tmp_path / "venv-elsewhere").symlink_to(Path(sys.prefix))
    python = tmp_path / "venv-elsewhere" / "bin" / Path(sys.executable).name
    subprocess.run([str(python), "-m", "hack.images", "build", *names], cwd=images.REPO, check=True,
                   env={**os.environ, "VC_CACHE": str(tmp_path)}, capture_output=True, text=True)
    for name in names:
        info = json.loads((tmp_path / "images" / name / built[name].key / "info.json").read_text())
        assert info["digest"] == built[name].info["digest"], name
        again = tmp_path / "images" / name / built[name].key / "image.tar"
        assert images.sha256_file(again) == images.sha256_file(built[name].path), name
    assert json.loads((tmp_path / "images/pause" / built["pause"].key / "info.json").read_text())["ref"] == \
        "registry.k8s.io/pause:3.10.1"
