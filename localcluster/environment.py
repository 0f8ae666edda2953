"""The environment variables the local cluster reads: one registry.

After each name, who reads it: ``local-cluster`` and the flag it is the default of.
"""
from __future__ import annotations

LOCAL_CLUSTER_IMAGE = "LOCAL_CLUSTER_IMAGE"  # local-cluster --image
LOCAL_CLUSTER_ISOLATION = "LOCAL_CLUSTER_ISOLATION"  # local-cluster --isolation
LOCAL_CLUSTER_RUNTIME = "LOCAL_CLUSTER_RUNTIME"  # local-cluster --runtime
LOCAL_CLUSTER_SLOTS = "LOCAL_CLUSTER_SLOTS"  # local-cluster --slots
LOCAL_CLUSTER_SSH_PORT = "LOCAL_CLUSTER_SSH_PORT"  # local-cluster --ssh-port
LOCAL_CLUSTER_STATE_DIR = "LOCAL_CLUSTER_STATE_DIR"  # local-cluster
LOCAL_CLUSTER_WORKERS = "LOCAL_CLUSTER_WORKERS"  # local-cluster --workers
