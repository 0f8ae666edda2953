"""The environment variables the elastic package's processes read or write: one registry.

After each name, who reads or writes it: a command and its flag (the variable is the flag's
default), or a module. Variables shared with other packages are in ``shared.environment``.
"""
from __future__ import annotations

DISCOVER_HOSTS_CMD = "DISCOVER_HOSTS_CMD"  # dataset-sync --discover-cmd, ssh-bootstrap --discover-cmd
ELASTIC_ADOPT_WINDOW = "ELASTIC_ADOPT_WINDOW"  # elastic-run --adopt-window
ELASTIC_ADOPT_WORLD = "ELASTIC_ADOPT_WORLD"  # elastic.driver.hvdrun (adopt the running world; its window)
ELASTIC_DATASET = "ELASTIC_DATASET"  # elastic-run
ELASTIC_DISCOVERY_MODE = "ELASTIC_DISCOVERY_MODE"  # elastic-run
ELASTIC_HOSTS = "ELASTIC_HOSTS"  # dataset-sync --hosts, ssh-bootstrap --hosts
ELASTIC_HOSTS_FILE = "ELASTIC_HOSTS_FILE"  # dataset-sync --hosts-file, ssh-bootstrap --hosts-file
ELASTIC_JOB_ID = "ELASTIC_JOB_ID"  # elastic-run, elastic.common.reap
ELASTIC_LEADER_ELECTION = "ELASTIC_LEADER_ELECTION"  # elastic-run --leader-election (1 or 0)
ELASTIC_LEADER_IDENTITY = "ELASTIC_LEADER_IDENTITY"  # elastic-run --leader-identity
ELASTIC_LEADER_LEASE = "ELASTIC_LEADER_LEASE"  # elastic-run --leader-lease
ELASTIC_LEADER_VALID_UNTIL = "ELASTIC_LEADER_VALID_UNTIL"  # elastic.launch.fencing (writes), elastic.driver.leading
ELASTIC_LEASE = "ELASTIC_LEASE"  # elastic-run
ELASTIC_LEAVE_GRACE = "ELASTIC_LEAVE_GRACE"  # elastic-run
ELASTIC_LOG_DIR = "ELASTIC_LOG_DIR"  # elastic-run
ELASTIC_MAX_NP = "ELASTIC_MAX_NP"  # elastic-run
ELASTIC_METRICS_FILE = "ELASTIC_METRICS_FILE"  # elastic-run
ELASTIC_MIN_NP = "ELASTIC_MIN_NP"  # elastic-run
ELASTIC_NAMESPACE = "ELASTIC_NAMESPACE"  # ssh-bootstrap --namespace
ELASTIC_NETWORK_INTERFACE = "ELASTIC_NETWORK_INTERFACE"  # elastic-run
ELASTIC_PLOT = "ELASTIC_PLOT"  # elastic-run
ELASTIC_REAP_SSH = "ELASTIC_REAP_SSH"  # elastic.driver.hvdrun
ELASTIC_REMOTE_RSYNC = "ELASTIC_REMOTE_RSYNC"  # dataset-sync --remote-rsync
ELASTIC_RENDEZVOUS_ADDRESS = "ELASTIC_RENDEZVOUS_ADDRESS"  # elastic-run --rendezvous-address, elastic.driver.hvdrun
ELASTIC_RENDEZVOUS_BIND = "ELASTIC_RENDEZVOUS_BIND"  # elastic-run --rendezvous-bind, elastic.driver.hvdrun
ELASTIC_RENDEZVOUS_PORT = "ELASTIC_RENDEZVOUS_PORT"  # elastic-run --rendezvous-port, elastic.driver.hvdrun
ELASTIC_SSH_CONFIG = "ELASTIC_SSH_CONFIG"  # elastic.ssh.config
ELASTIC_SSH_DIR = "ELASTIC_SSH_DIR"  # ssh-bootstrap --out
ELASTIC_SSH_IDENTITY = "ELASTIC_SSH_IDENTITY"  # elastic-run, ssh-bootstrap --identity
ELASTIC_SSH_JOBS = "ELASTIC_SSH_JOBS"  # ssh-bootstrap
ELASTIC_SSH_PORT = "ELASTIC_SSH_PORT"  # elastic-run, ssh-bootstrap
ELASTIC_SSH_TIMEOUT = "ELASTIC_SSH_TIMEOUT"  # ssh-bootstrap
ELASTIC_SSH_USER = "ELASTIC_SSH_USER"  # ssh-bootstrap --user
ELASTIC_STALL_TIMEOUT = "ELASTIC_STALL_TIMEOUT"  # elastic-run
ELASTIC_SYNC_ALLOWED_ROOTS = "ELASTIC_SYNC_ALLOWED_ROOTS"  # dataset-sync
ELASTIC_SYNC_JOBS = "ELASTIC_SYNC_JOBS"  # dataset-sync
ELASTIC_SYNC_LOCK_TIMEOUT = "ELASTIC_SYNC_LOCK_TIMEOUT"  # dataset-sync
ELASTIC_SYNC_RELAY = "ELASTIC_SYNC_RELAY"  # dataset-sync --relay
ELASTIC_SYNC_RETRIES = "ELASTIC_SYNC_RETRIES"  # dataset-sync
ELASTIC_SYNC_SYMLINKS = "ELASTIC_SYNC_SYMLINKS"  # dataset-sync --symlinks
ELASTIC_SYNC_TRANSPORT = "ELASTIC_SYNC_TRANSPORT"  # dataset-sync --transport
ELASTIC_SYNC_VERIFY = "ELASTIC_SYNC_VERIFY"  # dataset-sync --verify-unchanged
ELASTIC_TERM_GRACE = "ELASTIC_TERM_GRACE"  # elastic-run
ELASTIC_TIMEOUT = "ELASTIC_TIMEOUT"  # elastic-run
HOROVOD_ELASTIC_DRIVER_WAIT = "HOROVOD_ELASTIC_DRIVER_WAIT"  # elastic.worker.lease (the window, to the training)
HOROVOD_ELASTIC_LEAVE_GRACE_SECONDS = "HOROVOD_ELASTIC_LEAVE_GRACE_SECONDS"  # elastic.launch.plan
HOROVOD_GLOO_RENDEZVOUS_ADDR = "HOROVOD_GLOO_RENDEZVOUS_ADDR"  # elastic.worker.lease
HOROVOD_GLOO_RENDEZVOUS_PORT = "HOROVOD_GLOO_RENDEZVOUS_PORT"  # elastic.worker.lease
NCCL_DEBUG = "NCCL_DEBUG"  # elastic.launch.nccl (a default for the training processes)
NCCL_NSOCKS_PERTHREAD = "NCCL_NSOCKS_PERTHREAD"  # elastic.launch.nccl (a default)
NCCL_SOCKET_NTHREADS = "NCCL_SOCKET_NTHREADS"  # elastic.launch.nccl (a default)
