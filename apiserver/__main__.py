"""``vc-apiserver``, the composition root, in sample-apiserver's shape: the flags are parsed into options
(the server's groups, :mod:`apiserver.server.options`, and the reconciler's, :mod:`reconciler.options`),
validated together, turned into a frozen config, completed, and the server is built from it and run.
The embedded reconcile loop is wired in here and nowhere else, handed the server's parts explicitly."""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass, replace

import uvloop

from apiserver.machinery.optiongroups import group_from_args
from apiserver.server.app import Server
from apiserver.server.config import CompletedConfig, Config
from apiserver.server.new import new_server
from apiserver.server.options import DESCRIPTION, LoggingOptions, ServerOptions
from reconciler.options import AGENT_WITHOUT_HOST, ReconcilerConfig, ReconcilerOptions

__all__ = ["Options", "main", "parse_args"]

RUNTIME_WITHOUT_KEY = "--control-plane-runtime needs --encryption-key-file (tenant keys are stored encrypted)"


def parser() -> argparse.ArgumentParser:
    """Every flag of the process, each group in its own section of ``--help``."""
    p = argparse.ArgumentParser(prog="vc-apiserver", description=DESCRIPTION)
    ServerOptions.add_flags(p)
    ReconcilerOptions.add_flags(p)
    LoggingOptions.add_flags(p)
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags as parsed, one attribute per flag (argparse exits 2 on a flag it cannot read)."""
    return parser().parse_args(argv)


@dataclass(frozen=True)
class Options:
    """The process's options: the server's, the reconciler's, and logging."""

    server: ServerOptions
    reconciler: ReconcilerOptions
    logs: LoggingOptions

    @classmethod
    def parse(cls, argv: list[str] | None = None) -> Options:
        args = parse_args(argv)
        return cls(ServerOptions.from_args(args), ReconcilerOptions.from_args(args), group_from_args(LoggingOptions, args))

    def validate(self) -> list[str]:
        """Every error the flags hold, together. Beside each group's own, what the server and the loop must
        agree on: a control-plane runtime and the agent joiner need the tenant PKIs, which only an
        encryption key lets the server keep."""
        errors = []
        encrypted = bool(self.server.etcd.encryption_key_file)
        if self.reconciler.enabled and self.reconciler.runtime.control_plane_runtime != "none" and not encrypted:
            errors.append(RUNTIME_WITHOUT_KEY)
        errors += self.server.validate() + self.reconciler.validate() + self.logs.validate()
        if self.reconciler.enabled and self.reconciler.joiner.node_joiner == "agent" and not encrypted:
            errors.append(AGENT_WITHOUT_HOST)  # the host half is known once the config is complete
        return errors

    def config(self) -> Config:
        """The server's config, told how long the configured runtime takes to wake a control plane."""
        return self.server.config(wake_estimate=self.reconciler.wake_estimate(),
                                  kubernetes_versions=self.reconciler.kubernetes_versions())


def wire_reconciler(server: Server, config: ReconcilerConfig) -> None:
    """The embedded loop, started and stopped with the server's app, given what it works with."""
    from reconciler.manager import attach  # the embedded loop is optional; import it only when used

    serving = server.config.serving
    runtime = config.new_runtime(server.host, config.tenant_webhook(serving.bind_address, serving.secure_port,
                                                                    serving.cert_file))
    if runtime is not None:
        server.tenant_metrics.usage = runtime.usage
    attach(server.app, registry=server.registry, cache=server.cache, etcd=server.etcd, host=server.host,
           events=server.events, secrets=server.secrets, runtime=runtime,
           lease_duration=config.lease_duration, identity=config.identity, workers=config.workers,
           joiner=config.new_joiner(server.host, server.secrets),
           slices=replace(config.slices, tls=(serving.cert_file, serving.key_file)),
           credentials=server.credentials, rotation_overlap=config.runtime.rotation_overlap,
           kubernetes_versions=config.runtime.kubernetes_versions, upgrade_timeout=config.runtime.upgrade_timeout)


async def serve(completed: CompletedConfig, reconciler: ReconcilerConfig | None) -> None:
    server = new_server(completed)  # on the loop that runs it: its clients belong to it
    if reconciler is not None:
        wire_reconciler(server, reconciler)
    await server.run()


def main(argv: list[str] | None = None) -> None:
    options = Options.parse(argv)
    if errors := options.validate():
        raise SystemExit("\n".join(errors))
    options.logs.apply()
    completed = options.config().complete()
    uvloop.install()
    asyncio.run(serve(completed, options.reconciler.config()))


if __name__ == "__main__":
    main()
