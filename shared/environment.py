"""Environment variables that cross a package's border: one registry (standard library only:
``discover-hosts`` imports it). Each package keeps its own in ``<package>/environment.py``;
``tests/test_environment.py`` holds every variable's name to its registry. After each name,
who reads or writes it: a command and its flag (the variable is the flag's default), or a module.
"""
from __future__ import annotations

DISCOVERY_NAMESPACE = "DISCOVERY_NAMESPACE"  # discover-hosts --namespace, discovery-daemon --namespace, elastic-run
DISCOVERY_POD_UID = "DISCOVERY_POD_UID"  # discovery.admission, elastic.prepare.hook
DISCOVERY_PORT = "DISCOVERY_PORT"  # discover-hosts, discovery-daemon --port, elastic-run
DISCOVERY_SELECTOR = "DISCOVERY_SELECTOR"  # discover-hosts --selector, discovery-daemon --selector, elastic-run
DISCOVERY_TOKEN = "DISCOVERY_TOKEN"  # discover-hosts --token, discovery-daemon --token, shared.daemon_client
# discover-hosts --url, elastic-run, elastic.driver.hvdrun, elastic.launch.plan, shared.daemon_client
DISCOVERY_URL = "DISCOVERY_URL"
ELASTIC_RUN_ID = "ELASTIC_RUN_ID"  # shared.lease_wire
HOROVOD_ELASTIC_EVENTS_FILE = "HOROVOD_ELASTIC_EVENTS_FILE"  # shared.driver_events
HOROVOD_HOSTNAME = "HOROVOD_HOSTNAME"  # training.trace, elastic.worker.lease (set by horovodrun)
HOROVOD_LOCAL_RANK = "HOROVOD_LOCAL_RANK"  # training.trainer_base, elastic.worker.lease (set by horovodrun)
# discover-hosts, elastic.sync.manifest, localcluster.statefiles, training.imagefolder
XDG_CACHE_HOME = "XDG_CACHE_HOME"
