"""The ``process`` runtime: tenant control planes as local processes (:mod:`.runtime`)."""

from reconciler.runtime.process.runtime import ProcessRuntime
from reconciler.runtime.process.supervisor import COMPONENTS

__all__ = ["COMPONENTS", "ProcessRuntime"]
