"""The ``pods`` runtime's snapshot pods: vc-apiserver's image run beside a tenant's etcd, on the
snapshot volume, doing there what the ``process`` runtime does in vc-apiserver.

  python -m reconciler.backup save --root DIR --namespace NS --name VC --snapshot NAME --time RFC3339
                                   --keep N --endpoint URL --cacert F --cert F --key F
  python -m reconciler.backup prune --root DIR --namespace NS --name VC --keep N
  python -m reconciler.backup restore --snapshot FILE --data-dir DIR --member NAME --peer-url URL
                                      --initial-cluster CLUSTER --token TOKEN [--etcdutl PATH] --label TEXT

The result (:mod:`.results`), which vc-apiserver reads from the pod's log, is ``{"taken": S, "kept": [S, ...]}``, ``{"kept": [...]}`` or ``{"restored": bool}``, each S a
snapshot's record; or ``{"reason": ..., "message": ...}`` with exit status 1 when it failed.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import shutil
import sys
from pathlib import Path
from typing import Any

from apiserver.etcd.client import EtcdConfig
from reconciler.backup import etcd as backup
from reconciler.backup.results import encode, line
from reconciler.backup.snapshots import SnapshotStore


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m reconciler.backup")
    verbs = p.add_subparsers(dest="verb", required=True)
    for verb in ("save", "prune"):
        v = verbs.add_parser(verb)
        v.add_argument("--root", type=Path, required=True)
        v.add_argument("--namespace", required=True)
        v.add_argument("--name", required=True)
        v.add_argument("--keep", type=int, required=True)
    save = verbs.choices["save"]
    save.add_argument("--snapshot", required=True)
    save.add_argument("--time", required=True, type=dt.datetime.fromisoformat)
    save.add_argument("--endpoint", required=True)
    for flag in ("--cacert", "--cert", "--key"):
        save.add_argument(flag, required=True)
    restore = verbs.add_parser("restore")
    restore.add_argument("--snapshot", type=Path, required=True)
    restore.add_argument("--data-dir", type=Path, required=True)
    restore.add_argument("--label", required=True)
    restore.add_argument("--etcdutl", type=Path, default=Path(shutil.which("etcdutl") or "/usr/local/bin/etcdutl"))
    for flag in ("--member", "--peer-url", "--initial-cluster", "--token"):
        restore.add_argument(flag, required=True)
    return p


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    if args.verb == "restore":
        if args.data_dir.exists():
            return {"restored": False}
        backup.check(args.etcdutl, args.snapshot, args.label)
        member = backup.Member(args.member, args.peer_url, args.initial_cluster, args.token)
        return {"restored": backup.restore(args.etcdutl, args.snapshot, args.data_dir, member, args.label)}
    store = SnapshotStore(args.root)
    if args.verb == "prune":
        await asyncio.to_thread(store.sweep, args.namespace, args.name)
        return {"kept": encode(await asyncio.to_thread(store.prune, args.namespace, args.name, args.keep))}
    config = EtcdConfig([args.endpoint], cafile=args.cacert, certfile=args.cert, keyfile=args.key,
                        request_timeout=10.0)
    taken, kept = await backup.take(store, args.namespace, args.name, args.snapshot, args.time, args.keep, config)
    return {"taken": dataclasses.asdict(taken), "kept": encode(kept)}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        result, status = asyncio.run(_run(args)), 0
    except backup.BackupFailure as e:
        result, status = {"reason": e.reason, "message": e.message}, 1
    print(line(result), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
