"""The images Kubernetes' conformance suite runs, built here under the names the suite expects.

The suite (``e2e.test``, hack/build-bins.sh) names its images in ``test/utils/image/manifest.go``;
each recipe below is imported under that name, so no registry override is needed. Upstream builds
them on Alpine or old Debian; here they come from this Debian's packages, the suite's own agnhost
binary (built from ``k8s.io/kubernetes/test/images/agnhost`` at the pinned version) and busybox for
the shell tools the tests call. Only what the ``[Conformance]`` tests use is built.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from hack.images import debian, oci
from hack.images.build import (
    BUSYBOX,
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
# netcat-openbsd's, not busybox's), and the shell. Debian's busybox ash runs its own applets ahead of
# PATH and, as dash, drops environment variables whose names are not shell identifiers, which the
# upstream images' busybox 1.37 passes on (a ConfigMap test reads `1-data-1` from `sh -c env`);
# bash does both as those images do.
ALTERNATIVES = {"bin/nc": "nc.openbsd", "bin/netcat": "nc.openbsd", "bin/sh": "bash"}
SHELL = ("bash",)


def kubernetes_module() -> Path:
    """The pinned k8s.io/kubernetes module's files (the Go module cache build-bins.sh filled)."""
    ref = f"k8s.io/kubernetes@{versions.KUBERNETES_VERSION}"
    try:
        out = subprocess.run(["go", "mod", "download", "-json", ref], capture_output=True, text=True,
                             check=True, env={**os.environ, "GOFLAGS": "-mod=mod"})
    except (OSError, subprocess.CalledProcessError) as e:
        raise BuildError(f"go mod download {ref}: {e}") from None
    return Path(json.loads(out.stdout)["Dir"])


def with_shell(packages: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(packages + SHELL))


def tools_key(ctx: Context, packages: tuple[str, ...]) -> object:
    """What :func:`tools_layers` is made of: the packages with the shell, and busybox."""
    return debian.key(ctx.packages(with_shell(packages))) + debian.key(ctx.packages(BUSYBOX, BUSYBOX))


def tools_layers(ctx: Context, work: Path, packages: tuple[str, ...]) -> Layers:
    """Debian's ``packages`` with their libraries, and busybox's applets for every other tool a
    test's shell line calls (sh, seq, awk, hostname...) that the packages do not bring."""
    root = work / "root"
    packages = with_shell(packages)
    ctx.debian_root(root, packages)
    shutil.rmtree(root / "usr/lib/x86_64-linux-gnu/tc", ignore_errors=True)  # tc's qdisc plugins: no test's
    check_libraries(root)
    names = " ".join(f"{p.name}={p.version}" for p in ctx.packages(packages).values())
    for link, target in ALTERNATIVES.items():  # what the packages' update-alternatives would link
        if (root / link).parent.joinpath(target).exists() and not (root / link).exists():
            (root / link).symlink_to(target)
    tree = oci.Tree().add_tree(root)
    for path in ("etc/passwd", "etc/group"):
        tree.entries.pop(path, None)
    history, tools = busybox_tree(ctx, work, skip=lambda path: (root / path).exists()
                                  or (root / "usr" / path).exists())
    return [(history, base_files(tools)), (f"debian: {names}", tree)]


def agnhost() -> Recipe:
    module = kubernetes_module() / "test/images/agnhost"

    def inputs(ctx: Context) -> object:
        return {"bins": {b: sha256_file(binary(b)) for b in ("agnhost", "coredns")},
                "porter": [sha256_file(module / "porter" / f) for f in ("localhost.crt", "localhost.key")],
                "debian": tools_key(ctx, AGNHOST_PACKAGES)}

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
        return [*tools_layers(ctx, work, AGNHOST_PACKAGES), ("users of the suite's tests", users),
                ("COPY agnhost /agnhost, coredns /coredns, porter's certificate", tree)]
    version = (module / "VERSION").read_text().strip()
    return Recipe("agnhost", f"{E2E}/agnhost:{version}", inputs, layers,
                  {"Env": [f"PATH={PATH}"], "Entrypoint": ["/agnhost"], "Cmd": ["pause"], "WorkingDir": "/",
                   "ExposedPorts": {f"{p}/tcp": {} for p in (80, 8080, 8081, 9376, 5000)}},
                  aliases=(f"{E2E}/agnhost:2.55",))  # AgnhostPrev: the suite only needs a second name


def nginx(tag: str, name: str) -> Recipe:
    """Debian's nginx serving its default page on :80 in the foreground, logs to the container's
    output, as the suite's nginx images (their version is what the suite's rolling updates change)."""
    def layers(ctx: Context, work: Path) -> Layers:
        logs = oci.Tree().dir("var/log/nginx").dir("var/lib/nginx").dir("run")
        logs.symlink("var/log/nginx/access.log", "/dev/stdout").symlink("var/log/nginx/error.log", "/dev/stderr")
        logs.file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33:www-data:/var/www:/bin/false\n"
                                "nobody:x:65534:65534:nobody:/:/bin/false\n")
        logs.file("etc/group", "root:x:0:\nwww-data:x:33:\nnogroup:x:65534:\n")
        return [*tools_layers(ctx, work, NGINX_PACKAGES), (f"nginx {tag}: logs to stdout and stderr", logs)]
    return Recipe(name, f"{E2E}/nginx:{tag}",
                  lambda ctx: {"debian": tools_key(ctx, NGINX_PACKAGES), "tag": tag}, layers,
                  {"Env": [f"PATH={PATH}"], "Cmd": ["nginx", "-g", "daemon off;"], "StopSignal": "SIGQUIT",
                   "ExposedPorts": {"80/tcp": {}}})


def dnsutils() -> Recipe:
    """jessie-dnsutils: dig and a shell, for the DNS tests' second prober."""
    return Recipe("jessie-dnsutils", f"{E2E}/jessie-dnsutils:1.7",
                  lambda ctx: tools_key(ctx, DNSUTILS_PACKAGES),
                  lambda ctx, work: tools_layers(ctx, work, DNSUTILS_PACKAGES),
                  {"Env": [f"PATH={PATH}"], "Cmd": ["sh"]})


def e2e_busybox(ref: str, name: str, **config: object) -> Recipe:
    """busybox's tools with bash as ``sh`` (see :data:`ALTERNATIVES`)."""
    return Recipe(name, ref, lambda ctx: tools_key(ctx, ()),
                  lambda ctx, work: tools_layers(ctx, work, SHELL), {"Env": [f"PATH={PATH}"], "Cmd": ["sh"], **config})


def sample_apiserver() -> Recipe:
    """k8s.io/sample-apiserver at the pinned version (the Aggregator test's wardle.example.com API), as
    upstream's image: the static binary as the entrypoint."""
    def layers(ctx: Context, work: Path) -> Layers:
        tree = oci.Tree().file("sample-apiserver", source=binary("sample-apiserver"), mode=0o755)
        return [("base files", base_files(oci.Tree())), ("COPY sample-apiserver /", tree)]
    return Recipe("sample-apiserver", f"{E2E}/sample-apiserver:1.29.2", static_binary_inputs("sample-apiserver"),
                  layers, {"Env": [f"PATH={PATH}"], "Entrypoint": ["/sample-apiserver"]})


def suite_etcd() -> Recipe:
    """The etcd the sample API server stores in: the nodes' etcd image, under the suite's name."""
    recipe = etcd()
    recipe.name, recipe.ref = "e2e-etcd", "registry.k8s.io/etcd:3.6.6-0"
    return recipe


def recipes() -> list[Recipe]:
    return [e2e_busybox(f"{E2E}/busybox:1.37.0-1", "e2e-busybox"), agnhost(), nginx("1.14-4", "nginx"),
            nginx("1.15-4", "nginx-new"), dnsutils(),
            e2e_busybox(f"{E2E}/nonroot:1.4", "e2e-nonroot", User="1234"),  # as upstream's nonroot image
            sample_apiserver(), suite_etcd()]
