"""Build the images (no registry, no daemon) and import them into a containerd.

  python -m hack.images build [NAME ...] [--force]     archives in $VC_CACHE/images/<name>/<key>/image.tar
  python -m hack.images import --address SOCK [NAME ...] [--namespace k8s.io]
  python -m hack.images list                            name, reference and archive of each (built or not)
  python -m hack.images lock                            re-pin vc-apiserver's dependencies (requirements.txt)

`import` builds first what is not built yet. NAME is a short name: pause, busybox, etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, coredns, local-path-provisioner,
kubectl, python3-kubernetes, vc-apiserver (the nodes' images, the default), or one of the conformance suite's images:
e2e-busybox, agnhost, nginx, nginx-new, jessie-dnsutils, e2e-nonroot, sample-apiserver, e2e-etcd
(hack/images/e2e.py).
"""

from __future__ import annotations

import argparse
import sys

from hack.images import build as b
from hack.images import debian, e2e


def catalogue(names: list[str]) -> list[b.Recipe]:
    """The nodes' images by default; any image by name."""
    return b.recipes() + e2e.recipes() if names else b.recipes()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hack.images", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("build", help="build what is not built yet, print sizes and times")
    q.add_argument("names", nargs="*")
    q.add_argument("--force", action="store_true", help="rebuild even what is cached")
    q = sub.add_parser("import", help="import into a containerd (ctr images import)")
    q.add_argument("names", nargs="*")
    q.add_argument("--address", "-a", required=True, help="containerd's socket")
    q.add_argument("--namespace", "-n", default="k8s.io")
    sub.add_parser("list", help="the images and where their archives are")
    sub.add_parser("lock", help="re-resolve and pin vc-apiserver's runtime dependencies")
    args = p.parse_args(argv)
    try:
        if args.command == "build":
            built = b.build_all(args.names, force=args.force, catalogue=catalogue(args.names))
            print(b.table(built))
        elif args.command == "import":
            built = b.build_all(args.names, catalogue=catalogue(args.names))
            b.import_images(built, args.address, args.namespace)
        elif args.command == "list":
            ctx = b.Context()
            builder = b.builder_digest()
            for r in b.recipes() + e2e.recipes():
                key = b.image_key(ctx, r, builder)
                path = ctx.images / r.name / key / "image.tar"
                print(f"{r.name:<24} {r.ref:<48} {path if path.exists() else '(not built)'}")
        elif args.command == "lock":
            from hack.images import lock
            print(lock.lock())
    except (b.BuildError, debian.DebianError) as e:
        print(f"images: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
