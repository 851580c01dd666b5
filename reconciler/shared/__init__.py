"""Shared compute slices: a tenant node of exactly the requested cpu/memory whose pods run in the
host, in a namespace of the VirtualCluster, under a ResourceQuota of that size."""
