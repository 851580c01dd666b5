"""The pure parts of hack/images: deterministic layer tars, the config/manifest/index JSON, the
archive's layout, Debian's dependency fields, the pinned versions and where they are used."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest
import yaml

from hack import labstorage
from hack.images import build, debian, oci
from reconciler import versions
from reconciler.runtime import pods

REPO = Path(__file__).resolve().parents[2]


def layer_bytes(tree: oci.Tree, mtime: int | None = None) -> tuple[oci.Blob, bytes]:
    out = io.BytesIO()
    blob = oci.write_layer(tree, out, mtime)
    return blob, out.getvalue()


def sample(tmp_path: Path) -> oci.Tree:
    (tmp_path / "big").write_bytes(b"x" * 70_000)
    return (oci.Tree().file("usr/local/bin/tool", b"#!/bin/sh\n", mode=0o755)
            .file("etc/passwd", "root:x:0:0::/root:/bin/sh\n")
            .file("opt/big", source=tmp_path / "big")
            .symlink("bin/sh", "busybox").dir("tmp", 0o1777))


def test_a_layer_is_the_same_bytes_every_time_and_says_so_in_its_digest(tmp_path: Path) -> None:
    blob, data = layer_bytes(sample(tmp_path), 0)
    again, data_again = layer_bytes(sample(tmp_path), 0)
    assert data == data_again and blob == again
    assert blob == oci.blob_of(data)
    later, _ = layer_bytes(sample(tmp_path), 1_700_000_000)
    assert later.digest != blob.digest


def test_layer_entries_are_sorted_parents_first_owned_by_root_and_dated_by_the_epoch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1234567890")
    _, data = layer_bytes(sample(tmp_path))
    members = tarfile.open(fileobj=io.BytesIO(data)).getmembers()
    assert [m.name for m in members] == ["bin", "bin/sh", "etc", "etc/passwd", "opt", "opt/big", "tmp",
                                         "usr", "usr/local", "usr/local/bin", "usr/local/bin/tool"]
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", 1234567890)}
    by_name = {m.name: m for m in members}
    assert by_name["tmp"].mode == 0o1777 and by_name["usr"].mode == 0o755 and by_name["usr"].isdir()
    assert by_name["usr/local/bin/tool"].mode == 0o755 and by_name["etc/passwd"].mode == 0o644
    assert by_name["bin/sh"].issym() and by_name["bin/sh"].linkname == "busybox"
    assert by_name["opt/big"].size == 70_000


def test_source_date_epoch_must_be_a_whole_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    assert oci.source_date_epoch() == 0
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "soon")
    with pytest.raises(ValueError, match="SOURCE_DATE_EPOCH"):
        oci.source_date_epoch()


def test_a_directory_tree_gives_the_same_layer_whatever_its_mtimes_and_creation_order(tmp_path: Path) -> None:
    def make(root: Path, names: list[str], mtime: int) -> None:
        for name in names:
            p = root / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(name)
        (root / "lib").mkdir(exist_ok=True)
        (root / "lib" / "link").symlink_to("../a/x")
        os.link(root / "a" / "x", root / "z-hard")
        for p in [*root.rglob("*"), root]:
            os.utime(p, (mtime, mtime), follow_symlinks=False)

    make(tmp_path / "one", ["a/x", "b/y", "c"], 1000)
    make(tmp_path / "two", ["c", "b/y", "a/x"], 2_000_000)
    one, _ = layer_bytes(oci.Tree().add_tree(tmp_path / "one"), 0)
    two, data = layer_bytes(oci.Tree().add_tree(tmp_path / "two"), 0)
    assert one == two
    members = {m.name: m for m in tarfile.open(fileobj=io.BytesIO(data)).getmembers()}
    assert members["z-hard"].islnk() and members["z-hard"].linkname == "a/x"  # the link after its file
    kept, _ = layer_bytes(oci.Tree().add_tree(tmp_path / "one", keep=lambda rel: not rel.startswith("b")), 0)
    assert kept != one


def test_a_hard_link_group_is_written_file_first_in_tar_order() -> None:
    tree = oci.Tree().file("usr/bin/x", b"1").hardlink("usr-z/x", "usr/bin/x").hardlink("usr/a", "usr/bin/x")
    tree._fix_hardlinks()
    assert tree.entries["usr/a"].kind == "file"
    assert tree.entries["usr/bin/x"].link == "usr/a" and tree.entries["usr-z/x"].link == "usr/a"


def test_file_capabilities_are_written_as_setcap_writes_them() -> None:
    cap = oci.file_capability(oci.CAP_NET_BIND_SERVICE)
    assert cap == bytes.fromhex("01000002" "00040000" "00000000" "00000000" "00000000")
    tree = oci.Tree().file("coredns", b"ELF", mode=0o755, xattrs={"security.capability": cap})
    _, data = layer_bytes(tree, 0)
    member = tarfile.open(fileobj=io.BytesIO(data), encoding="utf-8").getmember("coredns")
    assert member.pax_headers["SCHILY.xattr.security.capability"].encode("utf-8", "surrogateescape") == cap


def test_paths_may_not_leave_the_root() -> None:
    with pytest.raises(ValueError):
        oci.Tree().file("../etc/passwd", b"")
    with pytest.raises(ValueError):
        oci.Tree().file("/", b"")
    assert list(oci.Tree().file("/./usr//bin/x", b"").entries) == ["usr/bin/x"]


def test_the_image_config_lists_its_layers_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "86400")
    raw = oci.image_config(["sha256:aa", "sha256:bb"], {"Entrypoint": ["/pause"], "User": "65535:65535"},
                           ["base", "COPY pause"])
    assert raw == oci.canonical_json(json.loads(raw))  # sorted keys, no spaces: stable bytes
    config = json.loads(raw)
    assert config == {
        "architecture": "amd64", "os": "linux", "created": "1970-01-02T00:00:00Z",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:aa", "sha256:bb"]},
        "history": [{"created": "1970-01-02T00:00:00Z", "created_by": "base"},
                    {"created": "1970-01-02T00:00:00Z", "created_by": "COPY pause"}]}
    with pytest.raises(ValueError):
        oci.image_config(["sha256:aa"], {}, [])


def test_the_archive_is_an_oci_layout_and_a_docker_archive(tmp_path: Path) -> None:
    blob, data = layer_bytes(oci.Tree().file("hello", b"hi\n"), 0)
    layer = tmp_path / "layer.tar"
    layer.write_bytes(data)
    config = oci.image_config([blob.digest], {"Cmd": ["sh"]}, ["layer"], created=0)

    def archive() -> tuple[oci.Blob, bytes]:
        out = io.BytesIO()
        return oci.write_archive(out, "docker.io/library/busybox:1.36", config, [(blob, layer)], mtime=0), out.getvalue()

    man_blob, data = archive()
    assert archive() == (man_blob, data)
    (tmp_path / "image.tar").write_bytes(data)
    got = oci.read_archive(tmp_path / "image.tar")
    cfg = oci.blob_of(config)
    assert got["names"] == ["blobs", "blobs/sha256", *sorted([
        f"blobs/sha256/{blob.hex}", f"blobs/sha256/{cfg.hex}", f"blobs/sha256/{man_blob.hex}",
        "index.json", "manifest.json", "oci-layout"])]
    assert got["index"]["manifests"] == [{
        "mediaType": oci.MEDIA_MANIFEST, "digest": man_blob.digest, "size": man_blob.size,
        "annotations": {"io.containerd.image.name": "docker.io/library/busybox:1.36",
                        "org.opencontainers.image.ref.name": "1.36"},
        "platform": {"architecture": "amd64", "os": "linux"}}]
    assert got["manifest"] == {
        "schemaVersion": 2, "mediaType": oci.MEDIA_MANIFEST,
        "config": {"mediaType": oci.MEDIA_CONFIG, "digest": cfg.digest, "size": cfg.size},
        "layers": [{"mediaType": oci.MEDIA_LAYER, "digest": blob.digest, "size": blob.size}]}
    assert got["docker"] == [{"Config": f"blobs/sha256/{cfg.hex}", "RepoTags": ["busybox:1.36"],
                              "Layers": [f"blobs/sha256/{blob.hex}"]}]
    assert got["config"]["rootfs"]["diff_ids"] == [blob.digest]  # uncompressed: digest = diff_id
    with tarfile.open(tmp_path / "image.tar") as tar:
        for m in tar.getmembers():
            assert (m.uid, m.gid, m.mtime) == (0, 0, 0)
            if m.name.startswith("blobs/sha256/") and m.isfile():
                f = tar.extractfile(m)
                assert f is not None and oci.blob_of(f.read()).hex == m.name.rsplit("/", 1)[1]


def test_references() -> None:
    assert oci.docker_tag("docker.io/library/busybox:1.36") == "busybox:1.36"
    assert oci.docker_tag("registry.k8s.io/pause:3.10.1") == "registry.k8s.io/pause:3.10.1"
    assert oci.tag_of("localhost:5000/vc-apiserver:0.1.0") == "0.1.0"
    with pytest.raises(ValueError):
        oci.tag_of("localhost:5000/vc-apiserver")


# -- Debian ----------------------------------------------------------------------------------------

def test_debian_dependency_fields() -> None:
    assert debian.parse_depends("libc6 (>= 2.34), media-types | mime-support, python3:any (>= 3.9~), "
                                "foo [amd64] <!nocheck>") == (
        ("libc6",), ("media-types", "mime-support"), ("python3",), ("foo",))
    assert debian.parse_depends("") == ()
    stanzas = debian.parse_stanzas(
        "Package: a\nVersion: 1:2.0-1\nPre-Depends: libc6\nDepends: b (>= 1),\n c | d\n"
        "Filename: pool/main/a/a/a_2.0-1_amd64.deb\nSHA256: ff\n\nPackage: b\nVersion: 1\n")
    assert stanzas["a"] == debian.Package("a", "1:2.0-1", "pool/main/a/a/a_2.0-1_amd64.deb", "ff",
                                          (("libc6",), ("b",), ("c", "d")))
    assert stanzas["b"].depends == () and stanzas["a"].deb_name == "a_2.0-1_amd64.deb"


def test_documentation_is_dropped_but_copyright_files_stay() -> None:
    assert debian.dropped("usr/share/doc/libc6/changelog.Debian.gz")
    assert not debian.dropped("usr/share/doc/libc6/copyright")
    assert debian.dropped("usr/share/man/man8/iptables.8.gz")
    assert debian.dropped("usr/lib/x86_64-linux-gnu/gconv/UTF-16.so")
    assert not debian.dropped("usr/lib/x86_64-linux-gnu/libc.so.6")


# -- versions and names ----------------------------------------------------------------------------

def test_versions_env_is_read_as_bash_assigns_it() -> None:
    assert versions.parse("# c\nA=v1 # pinned\n\nB_2=3.10.1\n") == {"A": "v1", "B_2": "3.10.1"}
    for bad in ("A=$(date)", "A='x'", "export A=1", "a=1"):
        with pytest.raises(ValueError):
            versions.parse(bad)
    assert versions.KUBERNETES_VERSION.startswith("v1.") and versions.ETCD_VERSION.startswith("v3.")


def test_the_images_carry_the_names_the_manifests_use() -> None:
    refs = {r.name: r.ref for r in build.recipes()}
    deploy = REPO / "apiservice" / "deploy"
    etcd_sts = next(d for d in yaml.safe_load_all((deploy / "cluster" / "etcd.yaml").read_text())
                    if d and d["kind"] == "StatefulSet")
    assert etcd_sts["spec"]["template"]["spec"]["containers"][0]["image"] == refs["etcd"] == versions.ETCD_IMAGE
    assert pods.ETCD_IMAGE == versions.ETCD_IMAGE and pods.KUBERNETES_VERSION == versions.KUBERNETES_VERSION
    for path in (deploy / "cluster" / "apiserver.yaml", deploy / "agent" / "daemonset.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] in ("Deployment", "DaemonSet"):
                # as written in manifests: the short name a kubelet resolves to the imported one
                assert doc["spec"]["template"]["spec"]["containers"][0]["image"] == oci.docker_tag(
                    refs["vc-apiserver"]), path
    assert refs["vc-apiserver"] == f"docker.io/library/{oci.docker_tag(refs['vc-apiserver'])}"
    runtime = pods.PodsRuntime(client=None)  # type: ignore[arg-type]
    assert runtime.backup_image == oci.docker_tag(refs["vc-apiserver"])
    for component in ("apiserver", "controller-manager", "scheduler"):
        assert runtime.objects.image(component) == refs[f"kube-{component}"]
        for version in versions.KUBERNETES_VERSIONS[1:]:  # each other version tenants may run has its images
            assert runtime.objects_at(version).image(component) == refs[f"kube-{component}-{version}"]
    assert refs["local-path-provisioner"] == labstorage.IMAGE and refs["busybox"] == labstorage.HELPER_IMAGE
    others = {f"kube-{c}-{v}" for c in ("apiserver", "controller-manager", "scheduler")
              for v in versions.KUBERNETES_VERSIONS[1:]}
    assert set(refs) == {"pause", "busybox", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                         "kube-proxy", "coredns", "local-path-provisioner", "kubectl", "python3-kubernetes", "vc-apiserver",
                         *others}


def test_the_vc_apiserver_image_gets_what_pip_install_would_install() -> None:
    files = dict(build.project_files())
    assert "apiserver/__main__.py" in files and "reconciler/nodeagent/__main__.py" in files
    assert "apiservice/deploy/cluster/apiserver.yaml" in files and "reconciler/versions.env" in files
    assert "apiserver/etcd/pb/rpc_pb2.pyi" in files
    assert not any(f.startswith(("tests/", "bench/")) or "__pycache__" in f for f in files)
    pins = build.requirements()
    assert all("==" in p and "--hash=sha256:" in p for p in pins)
    assert {p.split("==")[0].lower() for p in pins} >= {"aiohttp", "cryptography", "orjson", "protobuf", "uvloop"}
