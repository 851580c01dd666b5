"""vc-apiserver: the VirtualCluster aggregated API server."""

__version__ = "0.1.0"
