"""The images Kubernetes' conformance suite runs, built here under the names the suite expects.

The suite (``e2e.test``, hack/build-bins.sh) names its images in ``test/utils/image/manifest.go``;
each recipe below is imported under that name, so no registry override is needed. Upstream builds
them on Alpine or old Debian; here they come from this Debian's packages, the suite's own agnhost
binary (built from ``k8s.io/kubernetes/test/images/agnhost`` at the pinned version) and busybox for
the shell tools the tests call. Only what the ``[Conformance]`` tests use is built.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from hack.images import debian, oci, source
from hack.images.build import (
    PATH,
    BuildError,
    Context,
    Layers,
    Recipe,
    base_files,
    binary,
    busybox_tree,
    check_libraries,
    etcd,
    sha256_file,
    static_binary_inputs,
)
from reconciler import versions

E2E = "registry.k8s.io/e2e-test-images"

# What upstream's agnhost Dockerfile adds to Alpine: dig (DNS tests), curl and nc (most network
# tests), ss (NodePort tests), iperf and bash.
AGNHOST_PACKAGES = ("bind9-dnsutils", "curl", "netcat-openbsd", "iproute2", "iperf", "bash")
NGINX_PACKAGES = ("nginx-light",)
DNSUTILS_PACKAGES = ("bind9-dnsutils",)
# Names a package's maintainer script points at its tool with update-alternatives (nc -v is
# netcat-openbsd's, not busybox's).
ALTERNATIVES = {"bin/nc": "nc.openbsd", "bin/netcat": "nc.openbsd"}
GETENT = {"libc-bin": ["usr/bin/getent"]}  # the DNS tests' probes call it (Alpine's images have it)


def upstream_busybox(ctx: Context) -> tuple[Path, str]:
    """The shell and tools of upstream's images: busybox built from its release (hack/images/source.py)."""
    try:
        return source.busybox(ctx.cache), f"busybox {source.BUSYBOX.version} (release tarball, defconfig, static)"
    except source.SourceError as e:
        raise BuildError(str(e)) from None


def busybox_key(ctx: Context) -> object:
    return {"busybox": source.BUSYBOX.sha256, "builder": sha256_file(Path(source.__file__))}


@functools.cache
def kubernetes_module() -> Path:
    """The pinned k8s.io/kubernetes module's files (the Go module cache build-bins.sh filled)."""
    ref = f"k8s.io/kubernetes@{versions.KUBERNETES_VERSION}"
    try:
        out = subprocess.run(["go", "mod", "download", "-json", ref], capture_output=True, text=True,
                             check=True, env={**os.environ, "GOFLAGS": "-mod=mod"})
    except (OSError, subprocess.CalledProcessError) as e:
        raise BuildError(f"go mod download {ref}: {e}") from None
    return Path(json.loads(out.stdout)["Dir"])


def with_getent(packages: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(packages + tuple(GETENT)))


def tools_key(ctx: Context, packages: tuple[str, ...]) -> object:
    """What :func:`tools_layers` is made of: the packages with getent, and busybox."""
    return [debian.key(ctx.packages(with_getent(packages), tuple(GETENT))), busybox_key(ctx)]


@functools.cache
def suite_manifest() -> tuple[str, dict[str, str]]:
    """The suite's image list and its registries' addresses, read once."""
    manifest = (kubernetes_module() / "test/utils/image/manifest.go").read_text()
    return manifest, dict(re.findall(r'(\w+Registry):\s+"([^"]+)",', manifest))


def suite_image(image_id: str) -> str:
    """The reference the suite gives an image (``Agnhost``, ``BusyBox``...: the IDs of its
    ``test/utils/image/manifest.go``), read from the pinned suite's source."""
    manifest, registries = suite_manifest()
    found = re.search(rf'configs\[{image_id}\] = Config\{{list\.(\w+), "([^"]+)", "([^"]+)"\}}', manifest)
    if not found:
        raise BuildError(f"the suite names no image {image_id} (test/utils/image/manifest.go)")
    registry, name, tag = found.groups()
    if registry not in registries:
        raise BuildError(f"the suite's {registry} has no address in test/utils/image/manifest.go")
    return f"{registries[registry]}/{name}:{tag}"


def tools_layers(ctx: Context, work: Path, packages: tuple[str, ...]) -> Layers:
    """Debian's ``packages`` with their libraries on upstream's busybox: its ``sh`` and its applets for
    every other tool a test's shell line calls (seq, awk, hostname...) that the packages do not bring."""
    root = work / "root"
    packages = with_getent(packages)
    ctx.debian_root(root, packages, GETENT)
    shutil.rmtree(root / "usr/lib/x86_64-linux-gnu/tc", ignore_errors=True)  # tc's qdisc plugins: no test's
    check_libraries(root)
    names = " ".join(f"{p.name}={p.version}" for p in ctx.packages(packages, tuple(GETENT)).values())
    for link, target in ALTERNATIVES.items():  # what the packages' update-alternatives would link
        if (root / link).parent.joinpath(target).exists() and not (root / link).exists():
            (root / link).symlink_to(target)
    tree = oci.Tree().add_tree(root)
    for path in ("etc/passwd", "etc/group"):
        tree.entries.pop(path, None)
    history, tools = busybox_tree(ctx, work, skip=lambda path: (root / path).exists()
                                  or (root / "usr" / path).exists(), built=upstream_busybox(ctx))
    return [(history, base_files(tools)), (f"debian: {names}", tree)]


def agnhost(app: str = "") -> Recipe:
    """The suite's agnhost; with ``app`` (nautilus, kitten), upstream's image of that name: agnhost
    serving the app's page with ``test-webserver``."""
    module = kubernetes_module() / "test/images/agnhost"
    html = module.parent / app / "html" if app else None

    def inputs(ctx: Context) -> object:
        return {"bins": {b: sha256_file(binary(b)) for b in ("agnhost", "coredns")},
                "porter": [sha256_file(module / "porter" / f) for f in ("localhost.crt", "localhost.key")],
                "debian": tools_key(ctx, AGNHOST_PACKAGES),
                "html": sorted((f.name, sha256_file(f)) for f in html.iterdir()) if html else None}

    def layers(ctx: Context, work: Path) -> Layers:
        tree = oci.Tree().dir("uploads")
        tree.file("localhost.crt", source=module / "porter/localhost.crt", mode=0o644)
        tree.file("localhost.key", source=module / "porter/localhost.key", mode=0o644)
        tree.file("coredns", source=binary("coredns"), mode=0o755)  # some DNS tests run it from the image
        tree.file("agnhost", source=binary("agnhost"), mode=0o755).symlink("agnhost-2", "agnhost")
        # the user and group a SupplementalGroups test expects the image to define
        users = oci.Tree().file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
                                "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n")
        users.file("etc/group", "root:x:0:\nnogroup:x:65534:\nuser-defined-in-image:x:1000:\n"
                   "group-defined-in-image:x:50000:user-defined-in-image\n")
        out = [*tools_layers(ctx, work, AGNHOST_PACKAGES), ("users of the suite's tests", users),
               ("COPY agnhost /agnhost, coredns /coredns, porter's certificate", tree)]
        if html:
            page = oci.Tree()
            for f in sorted(html.iterdir()):
                page.file(f.name, source=f, mode=0o644)
            out.append((f"COPY {app}/html /", page))
        return out
    config = {"Env": [f"PATH={PATH}"], "Entrypoint": ["/agnhost"], "Cmd": ["pause"], "WorkingDir": "/",
              "ExposedPorts": {f"{p}/tcp": {} for p in (80, 8080, 8081, 9376, 5000)}}
    if app:
        return Recipe(app, suite_image(app.capitalize()), inputs, layers, {**config, "Cmd": ["test-webserver"]})
    return Recipe("agnhost", suite_image("Agnhost"), inputs, layers, config,
                  aliases=(suite_image("AgnhostPrev"),))  # the suite's previous agnhost: a second name is enough


def nginx(image_id: str, name: str) -> Recipe:
    """Debian's nginx serving its default page on :80 in the foreground, logs to the container's
    output, as the suite's nginx images (their version is what the suite's rolling updates change)."""
    def layers(ctx: Context, work: Path) -> Layers:
        logs = oci.Tree().dir("var/log/nginx").dir("var/lib/nginx").dir("run")
        logs.symlink("var/log/nginx/access.log", "/dev/stdout").symlink("var/log/nginx/error.log", "/dev/stderr")
        logs.file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33:www-data:/var/www:/bin/false\n"
                                "nobody:x:65534:65534:nobody:/:/bin/false\n")
        logs.file("etc/group", "root:x:0:\nwww-data:x:33:\nnogroup:x:65534:\n")
        return [*tools_layers(ctx, work, NGINX_PACKAGES), ("nginx: logs to stdout and stderr", logs)]
    return Recipe(name, suite_image(image_id), lambda ctx: {"debian": tools_key(ctx, NGINX_PACKAGES)}, layers,
                  {"Env": [f"PATH={PATH}"], "Cmd": ["nginx", "-g", "daemon off;"], "StopSignal": "SIGQUIT",
                   "ExposedPorts": {"80/tcp": {}}})


def dnsutils() -> Recipe:
    """jessie-dnsutils: dig and a shell, for the DNS tests' second prober."""
    return Recipe("jessie-dnsutils", suite_image("JessieDnsutils"),
                  lambda ctx: tools_key(ctx, DNSUTILS_PACKAGES),
                  lambda ctx, work: tools_layers(ctx, work, DNSUTILS_PACKAGES),
                  {"Env": [f"PATH={PATH}"], "Cmd": ["sh"]})


def e2e_busybox(ref: str, name: str, **config: object) -> Recipe:
    """Upstream's busybox (:func:`upstream_busybox`), ``sh`` the command."""
    return Recipe(name, ref, busybox_key,
                  lambda ctx, work: [busybox_tree(ctx, work, built=upstream_busybox(ctx))],
                  {"Env": [f"PATH={PATH}"], "Cmd": ["sh"], **config})


def sample_apiserver() -> Recipe:
    """k8s.io/sample-apiserver at the pinned version (the Aggregator test's wardle.example.com API), as
    upstream's image: the static binary as the entrypoint."""
    def layers(ctx: Context, work: Path) -> Layers:
        tree = oci.Tree().file("sample-apiserver", source=binary("sample-apiserver"), mode=0o755)
        return [("base files", base_files(oci.Tree())), ("COPY sample-apiserver /", tree)]
    return Recipe("sample-apiserver", suite_image("APIServer"), static_binary_inputs("sample-apiserver"),
                  layers, {"Env": [f"PATH={PATH}"], "Entrypoint": ["/sample-apiserver"]})


def nonewprivs() -> Recipe:
    """``nnp`` (the suite's nonewprivs, which prints its effective uid) set-uid root on busybox's
    tools, as upstream's image on Alpine."""
    def layers(ctx: Context, work: Path) -> Layers:
        tree = oci.Tree().file("usr/local/bin/nnp", source=binary("nonewprivs"), mode=0o4755)
        return [busybox_tree(ctx, work, built=upstream_busybox(ctx)),
                ("COPY nnp /usr/local/bin/nnp (set-uid root)", tree)]
    return Recipe("nonewprivs", suite_image("Nonewprivs"),
                  lambda ctx: {"bins": static_binary_inputs("nonewprivs")(ctx), "busybox": busybox_key(ctx)},
                  layers, {"Env": [f"PATH={PATH}"], "Cmd": ["nnp"]})


def suite_etcd() -> Recipe:
    """The etcd the sample API server stores in: the nodes' etcd image, under the suite's name."""
    recipe = etcd()
    recipe.name, recipe.ref = "e2e-etcd", suite_image("Etcd")
    return recipe


def recipes() -> list[Recipe]:
    return [e2e_busybox(suite_image("BusyBox"), "e2e-busybox"), agnhost(), nginx("Nginx", "nginx"),
            nginx("NginxNew", "nginx-new"), dnsutils(),
            e2e_busybox(suite_image("NonRoot"), "e2e-nonroot", User="1234"),  # as upstream's nonroot image
            sample_apiserver(), suite_etcd(), agnhost("nautilus"), agnhost("kitten"), nonewprivs()]
