"""The environment variables the discovery package's processes read: one registry.

After each name, who reads it: a command and its flag (the variable is the flag's default),
or a module. Variables shared with other packages are in ``shared.environment``.
"""
from __future__ import annotations

DISCOVERY_ADDRESS = "DISCOVERY_ADDRESS"  # discover-hosts --address, discovery-daemon --address
DISCOVERY_ADMITTED_FILE = "DISCOVERY_ADMITTED_FILE"  # discovery-daemon --admitted-file
DISCOVERY_CACHE_FILE = "DISCOVERY_CACHE_FILE"  # discover-hosts --cache-file
# discover-hosts --cluster-domain, discovery-daemon --cluster-domain
DISCOVERY_CLUSTER_DOMAIN = "DISCOVERY_CLUSTER_DOMAIN"
DISCOVERY_DEFAULT_SLOTS = "DISCOVERY_DEFAULT_SLOTS"  # discover-hosts --default-slots, discovery-daemon --default-slots
DISCOVERY_FALLBACK = "DISCOVERY_FALLBACK"  # discover-hosts --fallback
DISCOVERY_FIELD_SELECTOR = "DISCOVERY_FIELD_SELECTOR"  # discovery-daemon --field-selector
DISCOVERY_GROUP = "DISCOVERY_GROUP"  # discover-hosts --group
DISCOVERY_GROUP_BY = "DISCOVERY_GROUP_BY"  # discover-hosts --group-by, discovery-daemon --group-by
DISCOVERY_HOST = "DISCOVERY_HOST"  # discovery-daemon --host
DISCOVERY_HOSTFILE = "DISCOVERY_HOSTFILE"  # discovery-daemon --hostfile
DISCOVERY_LOG_LEVEL = "DISCOVERY_LOG_LEVEL"  # discovery-daemon --log-level
DISCOVERY_MAX_AGE = "DISCOVERY_MAX_AGE"  # discover-hosts --max-age
DISCOVERY_MAX_CACHE_AGE = "DISCOVERY_MAX_CACHE_AGE"  # discover-hosts --max-cache-age
DISCOVERY_PODS_FILE = "DISCOVERY_PODS_FILE"  # discovery-daemon --pods-file
DISCOVERY_POD_NAME = "DISCOVERY_POD_NAME"  # discovery.admission
DISCOVERY_POD_NAMESPACE = "DISCOVERY_POD_NAMESPACE"  # discovery.admission
DISCOVERY_PREPARE_CMD = "DISCOVERY_PREPARE_CMD"  # discovery-daemon --prepare-cmd
DISCOVERY_PREPARE_CONCURRENCY = "DISCOVERY_PREPARE_CONCURRENCY"  # discovery-daemon --prepare-concurrency
DISCOVERY_PREPARE_LEADER_IDENTITY = "DISCOVERY_PREPARE_LEADER_IDENTITY"  # discovery-daemon --prepare-leader-identity
DISCOVERY_PREPARE_LEADER_LEASE = "DISCOVERY_PREPARE_LEADER_LEASE"  # discovery-daemon --prepare-leader-lease
DISCOVERY_PREPARE_RECHECK = "DISCOVERY_PREPARE_RECHECK"  # discovery-daemon --prepare-recheck
DISCOVERY_PREPARE_RETRIES = "DISCOVERY_PREPARE_RETRIES"  # discovery-daemon --prepare-retries
DISCOVERY_PREPARE_TIMEOUT = "DISCOVERY_PREPARE_TIMEOUT"  # discovery-daemon --prepare-timeout
DISCOVERY_SOCKET = "DISCOVERY_SOCKET"  # discovery-daemon --socket
DISCOVERY_STALE_AFTER = "DISCOVERY_STALE_AFTER"  # discovery-daemon --stale-after
DISCOVERY_TIMEOUT = "DISCOVERY_TIMEOUT"  # discover-hosts --timeout
DISCOVERY_WATCH_TIMEOUT = "DISCOVERY_WATCH_TIMEOUT"  # discovery-daemon --watch-timeout
KUBERNETES_EXEC_INFO = "KUBERNETES_EXEC_INFO"  # discovery.discover_api
KUBERNETES_SERVICE_HOST = "KUBERNETES_SERVICE_HOST"  # discovery.discover_api
KUBERNETES_SERVICE_PORT = "KUBERNETES_SERVICE_PORT"  # discovery.discover_api
