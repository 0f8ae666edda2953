"""The discovery daemon's wire format, written once: its routes, query parameters and
response headers (the server, ``discovery.server``, and every client: ``discover-hosts``,
the launcher's push poller, waits and daemon supervision, the benchmarks).

Plain constants, no imports: ``discover-hosts`` loads this once a second and its start-up
time is measured in milliseconds. Header names are given as the server writes them and, for
clients (``shared.daemon_client`` lower-cases every header name), in lower case. The
``/hosts.json`` document is built by ``discovery.server`` and read by
``elastic.launch.waits``, which treats every field as optional and hostile.

- ``GET HOSTS`` (``?group=G``, ``?wait=GEN&timeout=S``): ``host:slots`` lines.
- ``GET HOSTS_JSON`` (``?group=G``): the table with reasons, as JSON.
- ``GET HEALTHZ`` / ``READYZ``: 200 while the watch runs / once synced and fresh (no token).
- ``GET METRICS``: Prometheus text.
- ``AGE`` seconds the list may be out of date; ``STALE`` ``0``/``1``; ``GENERATION`` the
  served table's generation (long poll: ``WAIT``); ``GROUP`` ``known``/``unknown``.
"""

HOSTS = "/hosts"
HOSTS_JSON = "/hosts.json"
HEALTHZ = "/healthz"
READYZ = "/readyz"
METRICS = "/metrics"
ROUTES = (HOSTS, HOSTS_JSON, HEALTHZ, READYZ, METRICS)
OPEN_ROUTES = (HEALTHZ, READYZ)  # answered without the bearer token

GROUP_PARAM = "group"
WAIT_PARAM = "wait"
TIMEOUT_PARAM = "timeout"

AGE = "X-Discovery-Age"
STALE = "X-Discovery-Stale"
GENERATION = "X-Discovery-Generation"
GROUP = "X-Discovery-Group"
GROUP_KNOWN, GROUP_UNKNOWN = "known", "unknown"

AGE_LOWER = AGE.lower()
STALE_LOWER = STALE.lower()
GENERATION_LOWER = GENERATION.lower()
GROUP_LOWER = GROUP.lower()

# ``/hosts.json`` ``waiting_pods[].reason`` (and the ``waiting`` counts' keys): why a pod is not
# served (``discovery.hosts``); the launcher tells capacity from failure by them
# (``elastic.launch.shortfall``).
WAIT_NOT_SCHEDULED = "not scheduled"   # no node yet: the pool is full or still growing
WAIT_NOT_RUNNING = "not running"       # on a node, starting (image pull, container creation)
WAIT_NOT_READY = "not ready"
WAIT_FAILING = "failing"               # on a node, a container crash-loops or cannot start; pod Failed
WAIT_TERMINATING = "terminating"
WAIT_NO_IP = "no pod IP"
WAIT_NO_GROUP = "no group label"
# ``skipped[].reason`` of a pod whose ``--prepare-cmd`` failed (``discovery.admission``)
PREPARE_FAILED = "prepare failed"
