"""kubectl as the installer's only client: what a platform engineer would type, and nothing to mock."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_KUBECTL = Path(__file__).resolve().parent.parent / ".local" / "bin" / "kubectl"


def default_kubectl() -> str:
    """The repo's pinned kubectl when built (``make bins``), else the one on PATH."""
    if REPO_KUBECTL.exists():
        return str(REPO_KUBECTL)
    return shutil.which("kubectl") or "kubectl"


class KubectlError(RuntimeError):
    def __init__(self, args: list[str], proc: subprocess.CompletedProcess[str]) -> None:
        self.returncode = proc.returncode
        self.stderr = proc.stderr.strip()
        super().__init__(f"kubectl {' '.join(args)} failed ({proc.returncode}): {self.stderr}")


@dataclass(frozen=True)
class Kubectl:
    binary: str
    kubeconfig: Path | None = None

    def run(self, *args: str, input: str | None = None, check: bool = True,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
        cmd = [self.binary, *(["--kubeconfig", str(self.kubeconfig)] if self.kubeconfig else []), *args]
        try:
            proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            raise KubectlError(list(args), subprocess.CompletedProcess(cmd, 127, "", f"{self.binary}: not found")) \
                from None
        if check and proc.returncode != 0:
            raise KubectlError(list(args), proc)
        return proc

    def get(self, *args: str) -> dict[str, Any] | None:
        """The object as JSON, or None when it does not exist."""
        proc = self.run("get", *args, "-o", "json", "--ignore-not-found")
        return json.loads(proc.stdout) if proc.stdout.strip() else None
