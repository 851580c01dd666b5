"""The node agent: a small mTLS service on every host node that points its kubelet at a tenant and back.

It is the production half of node promotion (``reconciler/agentjoiner.py`` is the other): the
reconciler hands it a node credential minted by the tenant CA, the agent swaps the kubelet's files
and restarts it, and on leave puts the original files back byte for byte. It runs no arbitrary
commands: three operations (join, leave, status) and one configured restart command.
"""

DEFAULT_PORT = 10350
CLIENT_CN = "kosmos:node-agent-client"  # who may call the agent by default: the reconciler's identity
SERVING_NAME = "kosmos-node-agent"  # the DNS name every agent's serving certificate carries, pinned by the joiner
