"""vc-apiserver: the VirtualCluster aggregated API server."""

__version__ = "0.1.0"
# The image this version is built as (hack/images) and deployed from (apiservice/deploy); it also runs
# the node agent and the pods runtime's snapshot and restore pods.
IMAGE = f"vc-apiserver:{__version__}"
