"""The images, each a recipe: what goes into its layers and its config, and what its cache key is.

Every image is built from local inputs only: binaries from ``hack/build-bins.sh`` (``.local/bin``),
Debian's packages (``apt-get download``), wheels from PyPI for vc-apiserver's dependencies (pinned
with hashes in ``requirements.txt`` beside this file), and this project's source. An image's key
is a hash of all its inputs (the recipes' own source included): an unchanged image is not rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hack.images import debian, oci
from reconciler import versions

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BIN = REPO / ".local" / "bin"
REQUIREMENTS = HERE / "requirements.txt"
CACHE = Path(os.environ.get("VC_CACHE", Path.home() / ".cache" / "vc-apiserver"))
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PYTHON = "python3.11"
SITE = "usr/local/lib/python3.11/dist-packages"  # on Debian's python3.11 sys.path, ahead of dist-packages
VC_VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
MANYLINUX = [f"manylinux_2_{i}_x86_64" for i in range(36, 4, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]  # what bookworm's glibc 2.36 runs


class BuildError(RuntimeError):
    pass


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def run(cmd: list[str], what: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    except FileNotFoundError:
        raise BuildError(f"{what}: {cmd[0]} is not installed (hack/node-packages.sh installs what images need)") from None
    if proc.returncode:
        raise BuildError(f"{what} failed ({' '.join(cmd[:4])} ...): {(proc.stderr or proc.stdout).strip()[-1500:]}")
    return proc


def binary(name: str, version: str = versions.KUBERNETES_VERSION) -> Path:
    """A binary ``make bins`` built; a Kubernetes control-plane binary of another offered ``version`` from its own
    directory."""
    path = BIN / name if version == versions.KUBERNETES_VERSION else BIN / f"kubernetes-{version}" / name
    if not path.exists():
        raise BuildError(f"{path} is missing: run `make bins` (hack/build-bins.sh) first")
    return path.resolve()


# -- the context a recipe builds in ------------------------------------------------------------

@dataclass
class Context:
    cache: Path = CACHE
    debs_dir: Path | None = None  # default: <cache>/debs
    _packages: dict[tuple[str, ...], dict[str, debian.Package]] = field(default_factory=dict)

    @property
    def images(self) -> Path:
        return self.cache / "images"

    @property
    def debs(self) -> Path:
        return self.debs_dir or self.cache / "debs"

    def packages(self, roots: tuple[str, ...], only: tuple[str, ...] = ()) -> dict[str, debian.Package]:
        """Debian packages resolved against the apt lists; remembered per lists' state, so a warm build
        does not ask apt-cache again."""
        if (roots, only) in self._packages:
            return self._packages[(roots, only)]
        lists = sorted(Path("/var/lib/apt/lists").glob("*_Packages*"))
        if not lists:
            raise BuildError("no Debian package lists: run hack/node-packages.sh (it runs apt-get update)")
        stamp = hashlib.sha256(oci.canonical_json(
            [roots, only, sorted(debian.EXCLUDED), [[p.name, p.stat().st_mtime_ns, p.stat().st_size] for p in lists],
             hashlib.sha256((HERE / "debian.py").read_bytes()).hexdigest()])).hexdigest()[:24]
        memo = self.images / "resolved" / f"{stamp}.json"
        if memo.exists():
            found = {n: debian.Package(n, v, f, s, ()) for n, v, f, s in json.loads(memo.read_text())}
        else:
            found = debian.resolve(roots, follow=lambda n: n not in only)
            memo.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(memo, json.dumps([[p.name, p.version, p.filename, p.sha256] for p in found.values()]))
        self._packages[(roots, only)] = found
        return found

    def debian_root(self, dest: Path, roots: tuple[str, ...], only: dict[str, list[str]] | None = None) -> None:
        only = only or {}
        debian.build_root(self.packages(roots, tuple(sorted(only))), self.debs, dest, only)


# -- recipes ----------------------------------------------------------------------------------

Layers = list[tuple[str, oci.Tree]]  # (what made it, for the config's history; the layer's files)


@dataclass
class Recipe:
    name: str  # short name: the cache's directory and the command line's word
    ref: str  # the full reference it is imported under
    inputs: Callable[[Context], Any]  # JSON-able: everything the image is made from
    layers: Callable[[Context, Path], Layers]  # the layers, given a scratch directory
    config: dict[str, Any]
    aliases: tuple[str, ...] = ()  # more references the same image is imported under


def base_files(tree: oci.Tree) -> oci.Tree:
    """What distroless's static base gives a Go binary: users, groups, name service order, /tmp."""
    tree.file("etc/passwd", "root:x:0:0:root:/root:/sbin/nologin\n"
                            "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
                            "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
    tree.file("etc/group", "root:x:0:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\nnogroup:x:65534:\n")
    tree.file("etc/nsswitch.conf", "hosts: files dns\n")
    tree.dir("root", 0o700).dir("tmp", 0o1777)
    return tree


def go_runner_layer(version: str = versions.KUBERNETES_VERSION) -> tuple[str, oci.Tree]:
    """Upstream's kube-* images are go-runner images: /go-runner as the entrypoint (kube-log-runner,
    "formerly known as go-runner", built with the Kubernetes binaries) on a distroless static root."""
    tree = base_files(oci.Tree()).file("go-runner", source=binary("kube-log-runner", version), mode=0o755)
    return "base files + /go-runner (kube-log-runner)", tree


def static_binary_inputs(*names: str, version: str = versions.KUBERNETES_VERSION) -> Callable[[Context], Any]:
    def inputs(ctx: Context) -> Any:
        return {n: sha256_file(binary(n, version)) for n in names}
    return inputs


def kube_image(component: str, version: str = versions.KUBERNETES_VERSION) -> Recipe:
    """A control-plane component's image at ``version`` (each version tenants may run has its own)."""
    def layers(ctx: Context, work: Path) -> Layers:
        caps = {"security.capability": oci.file_capability(oci.CAP_NET_BIND_SERVICE)} \
            if component == "kube-apiserver" else None  # upstream: setcap cap_net_bind_service=+ep
        tree = oci.Tree().file(f"usr/local/bin/{component}", source=binary(component, version), mode=0o755,
                               xattrs=caps)
        return [go_runner_layer(version), (f"COPY {component} /usr/local/bin/{component}", tree)]
    name = component if version == versions.KUBERNETES_VERSION else f"{component}-{version}"
    return Recipe(name, f"registry.k8s.io/{component}:{version}",
                  static_binary_inputs(component, "kube-log-runner", version=version), layers,
                  {"Env": [f"PATH={PATH}"], "Entrypoint": ["/go-runner"], "WorkingDir": "/"})


def kubectl() -> Recipe:
    """Upstream's kubectl image: the static binary on a distroless root, kubectl the entrypoint (a workload
    that talks to its cluster from a pod, through its service-account token)."""
    def layers(ctx: Context, work: Path) -> Layers:
        tree = base_files(oci.Tree()).file("bin/kubectl", source=binary("kubectl"), mode=0o755)
        return [("base files + /bin/kubectl", tree)]
    return Recipe("kubectl", f"registry.k8s.io/kubectl:{versions.KUBERNETES_VERSION}", static_binary_inputs("kubectl"),
                  layers, {"Env": [f"PATH={PATH}"], "Entrypoint": ["kubectl"], "WorkingDir": "/"})


# kube-proxy's root: what distroless-iptables has for it, from Debian's packages. Debian's iptables
# package holds both backends (xtables-legacy-multi, xtables-nft-multi); its postinst would point
# the names at nft with update-alternatives, as on Debian 12 hosts, and so does this image.
IPTABLES_PACKAGES = ("iptables", "conntrack", "ipset", "kmod")
IPTABLES_NAMES = ("iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore")


def kube_proxy_layers(ctx: Context, work: Path) -> Layers:
    root = work / "root"
    ctx.debian_root(root, IPTABLES_PACKAGES)
    for name in IPTABLES_NAMES:
        link = root / "usr/sbin" / name
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to("xtables-nft-multi")
    check_libraries(root)
    packages = " ".join(f"{p.name}={p.version}" for p in ctx.packages(IPTABLES_PACKAGES).values())
    tree = oci.Tree().add_tree(root)
    base = base_files(oci.Tree())
    for path in ("etc/passwd", "etc/group"):  # netbase and friends may bring their own; the base's wins
        tree.entries.pop(path, None)
    tree.merge(base)
    runner = oci.Tree().file("go-runner", source=binary("kube-log-runner"), mode=0o755)
    proxy = oci.Tree().file("usr/local/bin/kube-proxy", source=binary("kube-proxy"), mode=0o755)
    return [(f"debian: {packages}", tree), ("COPY /go-runner (kube-log-runner)", runner),
            ("COPY kube-proxy /usr/local/bin/kube-proxy", proxy)]


def kube_proxy() -> Recipe:
    return Recipe("kube-proxy", f"registry.k8s.io/kube-proxy:{versions.KUBERNETES_VERSION}",
                  lambda ctx: {"bins": static_binary_inputs("kube-proxy", "kube-log-runner")(ctx),
                               "debian": debian.key(ctx.packages(IPTABLES_PACKAGES))},
                  kube_proxy_layers, {"Env": [f"PATH={PATH}"], "Entrypoint": ["/go-runner"], "WorkingDir": "/"})


def check_libraries(root: Path) -> None:
    if missing := debian.missing_libraries(root):
        raise BuildError("shared libraries missing from the image: " + "; ".join(missing[:20]))


def etcd() -> Recipe:
    def layers(ctx: Context, work: Path) -> Layers:
        tree = oci.Tree().dir("var/etcd").dir("var/lib/etcd")
        for b in ("etcd", "etcdctl"):
            tree.file(f"usr/local/bin/{b}", source=binary(b), mode=0o755)
        return [("base files", base_files(oci.Tree())), ("COPY etcd etcdctl /usr/local/bin/", tree)]
    # As etcd's own Dockerfile: no entrypoint, etcd as the command, /var/lib/etcd the working directory.
    return Recipe("etcd", versions.ETCD_IMAGE, static_binary_inputs("etcd", "etcdctl"), layers,
                  {"Env": [f"PATH={PATH}"], "Cmd": ["/usr/local/bin/etcd"], "WorkingDir": "/var/lib/etcd/",
                   "ExposedPorts": {"2379/tcp": {}, "2380/tcp": {}}})


def coredns() -> Recipe:
    def layers(ctx: Context, work: Path) -> Layers:
        tree = oci.Tree().file("coredns", source=binary("coredns"), mode=0o755,
                               xattrs={"security.capability": oci.file_capability(oci.CAP_NET_BIND_SERVICE)})
        return [("base files", base_files(oci.Tree())), ("COPY coredns /coredns (cap_net_bind_service=+ep)", tree)]
    # As CoreDNS's Dockerfile: nonroot, binding :53 by the file capability.
    return Recipe("coredns", f"registry.k8s.io/coredns/coredns:{versions.COREDNS_VERSION}",
                  static_binary_inputs("coredns"), layers,
                  {"Entrypoint": ["/coredns"], "User": "65532:65532",
                   "ExposedPorts": {"53/tcp": {}, "53/udp": {}}})


def local_path_provisioner() -> Recipe:
    def layers(ctx: Context, work: Path) -> Layers:
        tree = oci.Tree().file("usr/bin/local-path-provisioner", source=binary("local-path-provisioner"), mode=0o755)
        return [("base files", base_files(oci.Tree())), ("COPY local-path-provisioner /usr/bin/", tree)]
    # As its Dockerfile: the binary on PATH as the command; the helper pods (busybox) run the scripts.
    return Recipe("local-path-provisioner",
                  f"docker.io/rancher/local-path-provisioner:{versions.LOCAL_PATH_PROVISIONER_VERSION}",
                  static_binary_inputs("local-path-provisioner"), layers,
                  {"Env": [f"PATH={PATH}"], "Cmd": ["local-path-provisioner"]})


def pause() -> Recipe:
    source = HERE / "pause.c"
    cflags = ["-Os", "-static", "-s", f'-DPAUSE_VERSION="{versions.PAUSE_VERSION}"']

    def inputs(ctx: Context) -> Any:
        gcc = run(["gcc", "--version"], "gcc").stdout.splitlines()[0]
        libc = run(["dpkg-query", "-W", "-f=${Version}", "libc6-dev"], "libc6-dev").stdout
        return {"source": sha256_file(source), "gcc": gcc, "libc6-dev": libc, "cflags": cflags}

    def layers(ctx: Context, work: Path) -> Layers:
        out = work / "pause"
        run(["gcc", *cflags, "-o", str(out), str(source)], "gcc pause.c")
        return [(f"gcc {' '.join(cflags)} pause.c -o /pause", oci.Tree().file("pause", source=out, mode=0o755))]
    return Recipe("pause", f"registry.k8s.io/pause:{versions.PAUSE_VERSION}", inputs, layers,
                  {"Entrypoint": ["/pause"], "User": "65535:65535"})


BUSYBOX = ("busybox-static",)


def busybox_tree(ctx: Context, work: Path, skip: Callable[[str], bool] = lambda path: False,
                 built: tuple[Path, str] | None = None) -> tuple[str, oci.Tree]:
    """Debian's static busybox (or ``built``: a binary and what it is) with a link per applet in /bin
    (but where ``skip(path)``: a real tool of another layer), and busybox's own users and directories."""
    if built is None:
        root = work / "busybox"
        ctx.debian_root(root, BUSYBOX, {"busybox-static": ["bin/busybox"]})
        version = ctx.packages(BUSYBOX, BUSYBOX)["busybox-static"].version
        built = (root / "bin/busybox", f"debian: busybox-static={version}")
    source, what = built
    applets = run([str(source), "--list"], "busybox --list").stdout.split()
    if "sh" not in applets:
        raise BuildError(f"{what} has no sh applet")
    tree = oci.Tree().file("bin/busybox", source=source, mode=0o755)
    linked = [a for a in applets if a != "busybox" and not skip(f"bin/{a}")]
    for applet in linked:
        tree.symlink(f"bin/{applet}", "busybox")
    tree.file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\ndaemon:x:1:1:daemon:/usr/sbin:/bin/false\n"
                            "nobody:x:65534:65534:nobody:/home:/bin/false\n")
    tree.file("etc/group", "root:x:0:\ndaemon:x:1:\nnogroup:x:65534:\n")
    tree.file("etc/nsswitch.conf", "hosts: files dns\n")
    tree.dir("root", 0o700).dir("tmp", 0o1777).dir("home").dir("var").dir("usr/sbin")
    return f"{what} /bin/busybox + {len(linked)} applet links", tree


def busybox(ref: str = "docker.io/library/busybox:1.36", name: str = "busybox") -> Recipe:
    return Recipe(name, ref, lambda ctx: debian.key(ctx.packages(BUSYBOX, BUSYBOX)),
                  lambda ctx, work: [busybox_tree(ctx, work)], {"Env": [f"PATH={PATH}"], "Cmd": ["sh"]})


# The official Python client as Debian packages it, on Debian's python3: what a tenant's Python workload that
# talks to its cluster from a pod runs (``config.load_incluster_config()``: tests/e2e/test_slice_apps.py).
PYTHON_CLIENT_PACKAGES = ("python3-minimal", "libpython3.11-stdlib", "python3-kubernetes", "python3-cffi-backend")
PYTHON_CLIENT_IMAGE = "localhost/python3-kubernetes:bookworm"


def python_client() -> Recipe:
    def layers(ctx: Context, work: Path) -> Layers:
        root = work / "root"
        ctx.debian_root(root, PYTHON_CLIENT_PACKAGES)
        check_libraries(root)
        packages = " ".join(f"{p.name}={p.version}" for p in ctx.packages(PYTHON_CLIENT_PACKAGES).values())
        tree = oci.Tree().add_tree(root)
        for path in ("etc/passwd", "etc/group"):  # as kube-proxy's: the base's own users win
            tree.entries.pop(path, None)
        tree.merge(base_files(oci.Tree()))
        return [(f"debian: {packages}", tree)]
    return Recipe("python3-kubernetes", PYTHON_CLIENT_IMAGE,
                  lambda ctx: debian.key(ctx.packages(PYTHON_CLIENT_PACKAGES)), layers,
                  {"Env": [f"PATH={PATH}", "PYTHONDONTWRITEBYTECODE=1", "LANG=C.UTF-8"], "Entrypoint": ["python3"],
                   "WorkingDir": "/"})


# -- vc-apiserver ---------------------------------------------------------------------------------

# Debian's python3.11 (python3-minimal gives /usr/bin/python3, libpython3.11-stdlib the rest of the
# standard library), libstdc++6 (manylinux wheels may link it: the policy counts it as the system's),
# and nsenter, which the node agent runs (reconciler/nodeagent: the kubelet's restart through the
# host's PID 1); nsenter comes alone out of util-linux, with its libraries.
PYTHON_PACKAGES = ("python3-minimal", "libpython3.11-stdlib", "libstdc++6", "util-linux", "libselinux1")
ONLY = {"util-linux": ["usr/bin/nsenter"]}


def project_files() -> list[tuple[str, Path]]:
    """What ``pip install .`` would install of this project: the packages pyproject.toml names (those
    with an ``__init__.py``) with their modules, and their package data."""
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    include = [p.rstrip("*") for p in tool["packages"]["find"]["include"]]
    data: dict[str, list[str]] = tool.get("package-data", {})
    files: dict[str, Path] = {}
    for top in include:
        for init in sorted((REPO / top).rglob("__init__.py")):
            pkg_dir = init.parent
            rel_pkg = pkg_dir.relative_to(REPO)
            if any(not (REPO / Path(*rel_pkg.parts[:i]) / "__init__.py").exists() for i in range(1, len(rel_pkg.parts))):
                continue  # not reachable as a package
            for f in sorted(pkg_dir.glob("*.py")):
                files[f.relative_to(REPO).as_posix()] = f
            for pattern in data.get(".".join(rel_pkg.parts), []):
                for f in sorted(pkg_dir.glob(pattern)):
                    if f.is_file():
                        files[f.relative_to(REPO).as_posix()] = f
    return sorted(files.items())


def project_digest() -> str:
    h = hashlib.sha256()
    for rel, path in project_files():
        h.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def requirements() -> list[str]:
    if not REQUIREMENTS.exists():
        raise BuildError(f"{REQUIREMENTS} is missing: run `python -m hack.images lock`")
    return [line for line in REQUIREMENTS.read_text().splitlines() if line and not line.startswith("#")]


def pip_target(target: Path) -> None:
    """vc-apiserver's dependencies, exactly as pinned (with hashes): cp311 manylinux wheels only."""
    plats = [a for p in MANYLINUX for a in ("--platform", p)]
    run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--require-hashes",
         "--only-binary=:all:", *plats, "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
         "--target", str(target), "--disable-pip-version-check", "--progress-bar=off",
         "-r", str(REQUIREMENTS)], "pip install --target (vc-apiserver's dependencies)")
    # Console scripts carry this interpreter's path in their shebang, so they (and their RECORD lines,
    # whose hashes would differ between checkouts) are left out: the image runs `python -m`.
    shutil.rmtree(target / "bin", ignore_errors=True)
    for record in sorted(target.glob("*.dist-info/RECORD")):
        lines = record.read_text().splitlines(keepends=True)
        record.write_text("".join(line for line in lines if not line.startswith("../../bin/")))


CONSOLE = f"""#!/usr/bin/{PYTHON}
import sys
from apiserver.__main__ import main
sys.exit(main())
"""


def dist_info() -> dict[str, str]:
    """Enough of a .dist-info for importlib.metadata to find vc-apiserver and its entry point."""
    name = f"vc_apiserver-{VC_VERSION}.dist-info"
    return {f"{name}/METADATA": f"Metadata-Version: 2.1\nName: vc-apiserver\nVersion: {VC_VERSION}\n",
            f"{name}/entry_points.txt": "[console_scripts]\nvc-apiserver = apiserver.__main__:main\n",
            f"{name}/top_level.txt": "".join(f"{p}\n" for p in sorted({r.split('/')[0] for r, _ in project_files()})),
            f"{name}/INSTALLER": "hack.images\n"}


def compile_all(root: Path, *dirs: str) -> None:
    """Byte-compile with the image's own interpreter (a chroot): the root file system is read only in
    the Deployment, so nothing could be cached at run time. checked-hash .pyc files hold no mtime, and
    with a fixed hash seed their bytes do not depend on the build."""
    if os.geteuid() != 0:
        raise BuildError("byte-compiling in the image's root needs root (chroot)")
    # A fixed hash seed: frozenset constants are marshalled in hash order, which a random seed changes
    # from build to build (the wheels' .pyc files then differ while their sizes do not).
    run(["chroot", str(root), f"/usr/bin/{PYTHON}", "-m", "compileall", "-q", "-j1",
         "--invalidation-mode", "checked-hash", *[f"/{d}" for d in dirs]], "compileall in the image",
        env={**os.environ, "PYTHONHASHSEED": "0"})


def vc_apiserver_layers(ctx: Context, work: Path) -> Layers:
    # 1. Debian's python3.11 (+ nsenter)
    base = work / "base"
    ctx.debian_root(base, PYTHON_PACKAGES, ONLY)
    (base / "usr/local/bin").mkdir(parents=True, exist_ok=True)
    compile_all(base, f"usr/lib/{PYTHON}")
    check_libraries(base)
    # 2. the dependencies, from wheels
    deps = work / "deps"
    pip_target(deps / SITE)
    # 3. the project
    app = work / "app"
    for rel, path in project_files():
        dest = app / SITE / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    for rel, text in dist_info().items():
        (app / SITE / rel).parent.mkdir(parents=True, exist_ok=True)
        (app / SITE / rel).write_text(text)
    # byte-compile deps and app in a scratch root that has all three, then take each layer's own files
    scratch = work / "scratch"
    shutil.copytree(base, scratch, symlinks=True)
    shutil.copytree(deps, scratch, symlinks=True, dirs_exist_ok=True)
    shutil.copytree(app, scratch, symlinks=True, dirs_exist_ok=True)
    compile_all(scratch, SITE)
    check_libraries(scratch)
    for layer in (deps, app):
        for src in sorted(layer.rglob("*.py")):
            rel = src.relative_to(layer)
            pyc = scratch / rel.parent / "__pycache__" / f"{rel.stem}.cpython-311.pyc"
            if pyc.exists():
                dest = layer / rel.parent / "__pycache__" / pyc.name
                dest.parent.mkdir(exist_ok=True)
                shutil.copyfile(pyc, dest)
    packages = " ".join(f"{p.name}={p.version}" for p in ctx.packages(PYTHON_PACKAGES, tuple(sorted(ONLY))).values())
    app_tree = oci.Tree().add_tree(app)
    app_tree.file("usr/local/bin/vc-apiserver", CONSOLE, mode=0o755)
    app_tree.symlink("usr/local/bin/python", f"/usr/bin/{PYTHON}")  # the manifests run `python -m ...`
    app_tree.symlink("usr/local/bin/python3", f"/usr/bin/{PYTHON}")
    base_tree = base_files(oci.Tree().add_tree(base))
    # etcd's restore tool, for the pods that restore a tenant's snapshot (python -m reconciler.backup)
    etcdutl = oci.Tree().file("usr/local/bin/etcdutl", source=binary("etcdutl"), mode=0o755)
    return [(f"debian: {packages}", base_tree),
            (f"pip install --target /{SITE} -r hack/images/requirements.txt", oci.Tree().add_tree(deps)),
            ("COPY etcdutl /usr/local/bin/", etcdutl),
            (f"vc-apiserver {VC_VERSION}: {len(project_files())} files", app_tree)]


def vc_apiserver() -> Recipe:
    def inputs(ctx: Context) -> Any:
        return {"debian": debian.key(ctx.packages(PYTHON_PACKAGES, tuple(sorted(ONLY)))),
                "requirements": requirements(), "project": project_digest(),
                "bins": static_binary_inputs("etcdutl")(ctx)}
    # The Deployment runs `vc-apiserver` as 65532 (its own securityContext); the node agent's
    # installer and static pod run `python -m ...` as root: the image's default user.
    # fully qualified as kubelets name it: a pod that says vc-apiserver:VERSION (the default --backup-image)
    # finds it imported, as one that says busybox:1.36 finds docker.io/library/busybox:1.36
    return Recipe("vc-apiserver", f"docker.io/library/vc-apiserver:{VC_VERSION}", inputs, vc_apiserver_layers,
                  {"Env": [f"PATH={PATH}", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", "LANG=C.UTF-8"],
                   "Entrypoint": ["vc-apiserver"], "WorkingDir": "/"})


def recipes() -> list[Recipe]:
    return [pause(), busybox(), etcd(), *(kube_image(c, v) for v in versions.KUBERNETES_VERSIONS
                                          for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")),
            kube_proxy(), coredns(), local_path_provisioner(), kubectl(), python_client(), vc_apiserver()]


# -- building -----------------------------------------------------------------------------------

def builder_digest() -> str:
    """The recipes and the writers are inputs of every image."""
    h = hashlib.sha256()
    for f in sorted(HERE.glob("*.py")) + [HERE / "pause.c", REPO / "reconciler" / "versions.env"]:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


@dataclass
class Built:
    recipe: Recipe
    key: str
    path: Path  # the archive
    info: dict[str, Any]
    cached: bool
    seconds: float  # this run's time for it (the key's inputs, or the whole build)


def image_key(ctx: Context, recipe: Recipe, builder: str) -> str:
    inputs = {"builder": builder, "ref": recipe.ref, "aliases": list(recipe.aliases), "config": recipe.config,
              "inputs": recipe.inputs(ctx),
              "epoch": oci.source_date_epoch()}
    return hashlib.sha256(oci.canonical_json(inputs)).hexdigest()[:20]


def build(recipe: Recipe, ctx: Context, builder: str | None = None, force: bool = False) -> Built:
    start = time.monotonic()
    key = image_key(ctx, recipe, builder or builder_digest())
    out_dir = ctx.images / recipe.name / key
    archive, info_file = out_dir / "image.tar", out_dir / "info.json"
    if not force and archive.exists() and info_file.exists():
        return Built(recipe, key, archive, json.loads(info_file.read_text()), True, time.monotonic() - start)
    ctx.images.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{recipe.name}-", dir=ctx.images) as tmp:
        work = Path(tmp)
        layers = recipe.layers(ctx, work)
        blobs: list[tuple[oci.Blob, Path]] = []
        for i, (_, tree) in enumerate(layers):
            path = work / f"layer-{i}.tar"
            with path.open("wb") as f:
                blobs.append((oci.write_layer(tree, f), path))
        config = oci.image_config([b.digest for b, _ in blobs], recipe.config, [h for h, _ in layers])
        out_dir.mkdir(parents=True, exist_ok=True)
        partial = out_dir / f"image.tar.{os.getpid()}.partial"  # builds of one image may run side by side
        with partial.open("wb") as f:
            digest = oci.write_archive(f, recipe.ref, config, blobs, aliases=recipe.aliases)
        partial.rename(archive)
    info = {"ref": recipe.ref, "key": key, "digest": digest.digest, "archive_bytes": archive.stat().st_size,
            "layers": [{"digest": b.digest, "bytes": b.size, "created_by": h} for (b, _), (h, _) in zip(blobs, layers, strict=True)],
            "build_seconds": round(time.monotonic() - start, 2)}
    write_atomically(info_file, json.dumps(info, indent=1) + "\n")
    prune(out_dir.parent)
    return Built(recipe, key, archive, info, False, time.monotonic() - start)


KEEP = 3  # builds of one image kept besides the newest: work trees sharing the cache may want each


def prune(image_dir: Path) -> None:
    builds = sorted((d for d in image_dir.iterdir() if (d / "info.json").exists()),
                    key=lambda d: (d / "info.json").stat().st_mtime, reverse=True)
    for stale in builds[KEEP + 1:]:
        shutil.rmtree(stale, ignore_errors=True)


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def select(names: list[str] | None, catalogue: list[Recipe] | None = None) -> list[Recipe]:
    all_recipes = recipes() if catalogue is None else catalogue
    if not names:
        return all_recipes
    by_name = {r.name: r for r in all_recipes}
    if unknown := [n for n in names if n not in by_name]:
        raise BuildError(f"no image called {', '.join(unknown)} (there are {', '.join(by_name)})")
    return [by_name[n] for n in names]


def build_all(names: list[str] | None = None, ctx: Context | None = None, force: bool = False,
              say: Callable[[str], None] = print, catalogue: list[Recipe] | None = None) -> list[Built]:
    """Build ``names`` (all) of ``catalogue`` (the nodes' images, :func:`recipes`)."""
    ctx = ctx or Context()
    builder = builder_digest()
    out = []
    for recipe in select(names, catalogue):
        b = build(recipe, ctx, builder, force)
        say(f"images: {recipe.ref:<48} {'cached' if b.cached else 'built '} {b.seconds:6.1f} s")
        out.append(b)
    return out


def table(built: list[Built]) -> str:
    lines = [f"{'image':<48} {'size MB':>8} {'layers':>6} {'build s':>8}  digest"]
    for b in built:
        i = b.info
        lines.append(f"{i['ref']:<48} {i['archive_bytes'] / 1e6:8.1f} {len(i['layers']):6d} "
                     f"{i['build_seconds']:8.1f}  {i['digest'][7:19]}")
    total = sum(b.info["archive_bytes"] for b in built)
    unique = {layer["digest"]: layer["bytes"] for b in built for layer in b.info["layers"]}
    lines.append(f"{len(built)} images, {total / 1e6:.1f} MB of archives ({sum(unique.values()) / 1e6:.1f} MB of "
                 f"distinct layers); this run took {sum(b.seconds for b in built):.1f} s")
    return "\n".join(lines)


# -- importing ----------------------------------------------------------------------------------

def import_images(built: list[Built], address: str, namespace: str = "k8s.io", ctr: str = "ctr",
                  say: Callable[[str], None] = print) -> None:
    """``ctr -a ADDRESS -n NAMESPACE images import`` each archive (unpacked for the default snapshotter)."""
    if shutil.which(ctr) is None:
        raise BuildError(f"{ctr} is not installed (containerd's client: hack/node-packages.sh)")
    for b in built:
        start = time.monotonic()
        proc = subprocess.run([ctr, "-a", address, "-n", namespace, "images", "import", str(b.path)],
                              capture_output=True, text=True)
        if proc.returncode:
            raise BuildError(f"ctr images import {b.recipe.ref} into {address} failed: "
                             f"{(proc.stderr or proc.stdout).strip()[-1000:]}")
        say(f"images: imported {b.recipe.ref} into {address} ({namespace}) in {time.monotonic() - start:.1f} s")
