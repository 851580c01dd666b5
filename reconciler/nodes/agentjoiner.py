"""The node-agent joiner (production): a promoted host node's own kubelet serves the tenant.

The reconciler mints the node's credential — CN ``system:node:<name>``, O ``system:nodes``, signed by
the tenant CA, so the tenant's Node authorizer and NodeRestriction hold the kubelet to its own Node —
and hands it over mTLS to the node agent on the host node (``reconciler/nodeagent``), which re-points
the kubelet; the kubelet then registers the Node in the tenant itself. Leaving gives the kubelet its
host configuration back before the tenant forgets the node, so it is never registered twice.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.kubeclient.client import ClusterAccess, HostError, HostUnavailable, KubeClient
from apiserver.machinery.jsonutil import Obj
from apiserver.storage.secrets import SecretStore, load_pki
from reconciler.nodeagent import DEFAULT_PORT, SERVING_NAME, protocol
from reconciler.nodes.selection import is_ready, node_name
from reconciler.tenantapi import remove_node

log = logging.getLogger(__name__)

CREDENTIAL_LIFETIME = dt.timedelta(days=365)
AGENT_TIMEOUT = 90.0  # seconds: a join or leave waits for the kubelet's restart


class PinnedNameContext(ssl.SSLContext):
    """A client context that verifies every server as ``server_name``, whatever address was dialled.

    Agents are dialled at node InternalIPs, which no certificate made at install time can name. So
    the agents share one serving certificate (CN and DNS SAN ``kosmos-node-agent``), and the joiner
    verifies the chain against ``--node-agent-ca-file`` *and* that name, as if it had dialled
    ``https://kosmos-node-agent``. The name keeps a CA that also signs other servers — say a
    cluster CA reused as the agent CA — from vouching for them as node agents. (Per-node
    certificates with IP SANs would bind an agent to its node, but nodes come and go after the
    install; a node whose copy of the shared key leaks can pose as any agent, which the
    installer's dedicated agent CA, signing nothing else, keeps from widening.)
    """

    server_name = SERVING_NAME

    def wrap_socket(self, sock: Any, server_side: bool = False, do_handshake_on_connect: bool = True,
                    suppress_ragged_eofs: bool = True, server_hostname: str | bytes | None = None,
                    session: ssl.SSLSession | None = None) -> ssl.SSLSocket:
        return super().wrap_socket(sock, server_side, do_handshake_on_connect, suppress_ragged_eofs,
                                   self.server_name, session)

    def wrap_bio(self, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO, server_side: bool = False,
                 server_hostname: str | bytes | None = None, session: ssl.SSLSession | None = None) -> ssl.SSLObject:
        return super().wrap_bio(incoming, outgoing, server_side, self.server_name, session)


def agent_client_context(ca: str | Path, cert: str | Path | None = None, key: str | Path | None = None,
                         server_name: str = SERVING_NAME) -> PinnedNameContext:
    """TLS to node agents: the agent CA, the pinned name (SANs only), and the client certificate."""
    ctx = PinnedNameContext(ssl.PROTOCOL_TLS_CLIENT)  # check_hostname and CERT_REQUIRED
    ctx.server_name = server_name
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.hostname_checks_common_name = False
    ctx.load_verify_locations(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key) if key is not None else None)
    return ctx


@dataclass(frozen=True)
class AgentAccess:
    """How the reconciler reaches node agents: their port, and TLS with its client certificate
    (see PinnedNameContext for how agents are verified)."""

    port: int
    ssl: ssl.SSLContext

    @classmethod
    def from_files(cls, ca: str | Path, cert: str | Path, key: str | Path, port: int = DEFAULT_PORT) -> AgentAccess:
        return cls(port, agent_client_context(ca, cert, key))


def internal_ip(host_node: Obj) -> str:
    addresses = (host_node.get("status") or {}).get("addresses") or []
    address = next((a.get("address") for a in addresses if a.get("type") == "InternalIP"), None)
    if not address:
        raise HostUnavailable(f"host node {node_name(host_node)} has no InternalIP to reach its node agent at")
    return str(address)


def _owner(vc: Obj) -> str:
    return VirtualCluster(vc).meta.key


class AgentJoiner:
    def __init__(self, host: KubeClient, secrets: SecretStore, access: AgentAccess) -> None:
        self.host = host
        self.secrets = secrets
        self.access = access

    def agent(self, host_node: Obj) -> KubeClient:
        """A client for the agent of one node (it answers with Status bodies, as an apiserver does)."""
        address = internal_ip(host_node)
        if ":" in address:
            address = f"[{address}]"
        return KubeClient(ClusterAccess(f"https://{address}:{self.access.port}", self.access.ssl),
                          timeout=AGENT_TIMEOUT, user_agent="vc-apiserver/node-joiner")

    async def join(self, vc: Obj, tenant: KubeClient, host_node: Obj, current: Obj | None) -> bool:
        if current is not None and is_ready(current):
            return True  # nothing to ask the agent: the kubelet already serves the tenant
        name = node_name(host_node)
        try:
            agent = self.agent(host_node)
        except HostUnavailable as e:
            log.warning("cannot join node %s: %s", name, e)
            return False
        try:
            state = await agent.get(protocol.STATUS)
            if not (state.get("joined") and state.get("virtualCluster") == _owner(vc)
                    and state.get("server") == tenant.server and state.get("kubeletRestarted")):
                await self._join(vc, tenant, agent, name)
        except (HostError, HostUnavailable) as e:  # one node's agent must not hold up the others
            log.warning("node agent of %s did not join it to %s: %s", name, _owner(vc), e)
            return False
        finally:
            await agent.close()
        try:
            return is_ready(await tenant.get(f"/api/v1/nodes/{name}"))
        except HostError as e:
            if e.code == 404:
                return False  # the kubelet has not registered yet
            raise

    async def _join(self, vc: Obj, tenant: KubeClient, agent: KubeClient, name: str) -> None:
        pki = await load_pki(self.secrets, vc)
        if pki is None:
            raise HostUnavailable(f"the PKI of {_owner(vc)} is not stored yet")
        not_after = dt.datetime.now(dt.UTC) + CREDENTIAL_LIFETIME
        credential = await asyncio.to_thread(pki.mint_client, protocol.node_user(name), (protocol.NODES_GROUP,),
                                             not_after)
        request = protocol.JoinRequest(_owner(vc), tenant.server, pki.files["ca.crt"], credential.cert_pem,
                                       credential.key_pem, name)
        await agent.create(protocol.JOIN, request.to_json())
        log.info("node agent of %s re-pointed its kubelet at %s (%s)", name, _owner(vc), tenant.server)

    async def leave(self, vc: Obj, tenant: KubeClient | None, name: str, pods: list[Obj] | None = None) -> None:
        """The kubelet goes back to the host first, then the tenant forgets the node. An agent that cannot
        be reached raises: a node whose kubelet may still serve a tenant is not handed back."""
        try:
            host_node = await self.host.get(f"/api/v1/nodes/{name}")
        except HostError as e:
            if e.code != 404:
                raise
            host_node = None  # gone from the host: nothing left to re-point
        if host_node is not None:
            agent = self.agent(host_node)
            try:
                await agent.create(protocol.LEAVE, {"virtualCluster": _owner(vc)})
            finally:
                await agent.close()
        if tenant is not None:
            await remove_node(tenant, name, pods)

    async def stop(self, vc: Obj) -> None:
        """Nothing runs per tenant: each node's kubelet was handed back by leave."""
