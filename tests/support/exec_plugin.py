"""A real exec credential plugin for tests: a small program written into a directory, told by files
there what to print, and leaving there what it was given (one run after the other)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"

PROGRAM = '''#!{python}
"""An exec credential plugin: prints reply-<run> (or reply), exits with exit-code, says stderr."""
import json, os, sys
from pathlib import Path

state = Path({state!r})
runs = state / "runs"
run = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(run))
(state / f"given-{{run}}.json").write_text(json.dumps({{
    "args": sys.argv[1:], "exec_info": os.environ.get("KUBERNETES_EXEC_INFO"),
    "env": {{k: v for k, v in os.environ.items() if k.startswith("PLUGIN_")}}, "stdin": sys.stdin.read()}}))
reply = state / f"reply-{{run}}"
sys.stdout.write((reply if reply.exists() else state / "reply").read_text())
if (state / "stderr").exists():
    sys.stderr.write((state / "stderr").read_text())
sys.exit(int((state / "exit-code").read_text()) if (state / "exit-code").exists() else 0)
'''


def exec_credential(token: str = "", *, expires_in: float | None = None, cert: bytes = b"", key: bytes = b"",
                    api_version: str = V1) -> str:
    status: dict[str, Any] = {}
    if token:
        status["token"] = token
    if cert:
        status["clientCertificateData"] = cert.decode()
    if key:
        status["clientKeyData"] = key.decode()
    if expires_in is not None:
        at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=expires_in)
        status["expirationTimestamp"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return json.dumps({"apiVersion": api_version, "kind": "ExecCredential", "status": status})


@dataclass
class Plugin:
    dir: Path

    @classmethod
    def create(cls, directory: Path) -> Plugin:
        directory.mkdir(parents=True, exist_ok=True)
        program = directory / "plugin"
        program.write_text(PROGRAM.format(python=sys.executable, state=str(directory)))
        program.chmod(0o755)
        return cls(directory)

    @property
    def program(self) -> Path:
        return self.dir / "plugin"

    def prints(self, text: str, run: int | None = None) -> None:
        """What the plugin prints (on run ``run`` only, or whenever no run-specific reply is set)."""
        (self.dir / (f"reply-{run}" if run else "reply")).write_text(text)

    def fails(self, exit_code: int, stderr: str = "") -> None:
        (self.dir / "exit-code").write_text(str(exit_code))
        (self.dir / "stderr").write_text(stderr)

    @property
    def runs(self) -> int:
        path = self.dir / "runs"
        return int(path.read_text()) if path.exists() else 0

    def given(self, run: int) -> dict[str, Any]:
        """What run ``run`` was given: args, KUBERNETES_EXEC_INFO (decoded), PLUGIN_* env, stdin."""
        given = json.loads((self.dir / f"given-{run}.json").read_text())
        given["exec_info"] = json.loads(given["exec_info"]) if given["exec_info"] else None
        return given


def write_kubeconfig(path: Path, server: str, user: dict[str, Any], *, ca: bytes | None = None,
                     cluster: dict[str, Any] | None = None, user_name: str = "someone") -> Path:
    """A kubeconfig with one context: ``server`` (its CA as data) and the user entry ``user``."""
    entry: dict[str, Any] = {"server": server, **(cluster or {})}
    if ca:
        entry["certificate-authority-data"] = base64.b64encode(ca).decode()
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "clusters": [{"name": "cluster", "cluster": entry}],
        "contexts": [{"name": "ctx", "context": {"cluster": "cluster", "user": user_name}}],
        "users": [{"name": user_name, "user": user}],
    }))
    return path
