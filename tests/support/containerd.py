"""A throwaway containerd: its own root, state, runc root and socket under one directory, so it
shares nothing with a containerd the machine may run (REFERENCE-REAL-NODES.md's recipe)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

CONFIG = """version = 2
root = "{dir}/root"
state = "{dir}/state"
[grpc]
  address = "{dir}/containerd.sock"
[ttrpc]
  address = "{dir}/containerd.sock.ttrpc"
[debug]
  address = "{dir}/debug.sock"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  restrict_oom_score_adj = true
  sandbox_image = "{sandbox_image}"
[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  BinaryName = "{runc}"
  Root = "{dir}/runc"
  SystemdCgroup = false
"""


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise FileNotFoundError(f"{tool} is not installed: run hack/node-packages.sh (Debian's containerd, runc)")
    return path


@dataclass
class Containerd:
    dir: Path
    sandbox_image: str = "registry.k8s.io/pause:3.10.1"
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return str(self.dir / "containerd.sock")

    def start(self, timeout: float = 20) -> Containerd:
        binary, runc = need("containerd"), need("runc")
        need("ctr")
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "config.toml"
        config.write_text(CONFIG.format(dir=self.dir, sandbox_image=self.sandbox_image, runc=runc))
        log = (self.dir / "containerd.log").open("wb")
        self.proc = subprocess.Popen([binary, "--config", str(config)], stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"containerd exited with {self.proc.returncode}: {self.log_tail()}")
            if self.ctr("version", check=False).returncode == 0:
                return self
            time.sleep(0.1)
        raise TimeoutError(f"containerd did not answer on {self.address} in {timeout} s: {self.log_tail()}")

    def log_tail(self) -> str:
        path = self.dir / "containerd.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def ctr(self, *args: str, namespace: str = "k8s.io", check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["ctr", "-a", self.address, "-n", namespace, *args], capture_output=True, text=True,
                              timeout=timeout)
        if check and proc.returncode:
            raise RuntimeError(f"ctr {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def stop(self) -> None:
        """Remove what is left of containers, stop containerd (by its PID), unmount and remove its
        directory."""
        if self.proc is not None and self.proc.poll() is None:
            for task in self.ctr("tasks", "ls", "-q", check=False).stdout.split():
                self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
                time.sleep(0.2)
                self.ctr("tasks", "rm", "-f", task, check=False)
            for container in self.ctr("containers", "ls", "-q", check=False).stdout.split():
                self.ctr("containers", "rm", container, check=False)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        with open("/proc/self/mounts") as f:
            mounts = [line.split()[1] for line in f]
        for m in sorted((m for m in mounts if m.startswith(str(self.dir) + "/")), reverse=True):
            subprocess.run(["umount", "-l", m], capture_output=True)
        if self.dir.exists() and os.geteuid() == 0:
            shutil.rmtree(self.dir, ignore_errors=True)
