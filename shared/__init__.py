"""Rules every part of the project must agree on, in one copy. Standard library only, and
importable by all four packages (``discovery``, ``elastic``, ``training``, ``localcluster``)
and by ``discover-hosts`` without slowing its start-up; shipped in the daemon image.

- ``shared.daemon_client``  the one client of the discovery daemon's HTTP protocol
  (``http://`` and ``unix:`` URLs, the bearer token, a deadline on the whole exchange).
- ``shared.atomicfile``     the one atomic writer (temporary file, fsync, rename).
- ``shared.hosts``          the one host rule (``host_ok``).
- ``shared.exitcodes``      the exit codes (0, 1, 2, 75, 127, 130, 128 + signal).
- ``shared.jsonlines``      the one reader of JSON-lines files other processes append to.
- ``shared.driver_events``  the Horovod driver's event records (format, reader, follower).
- ``shared.metrics_record`` the training's metrics record (``MetricsRecord``: writer and readers).
- ``shared.worker``         the one background-thread lifecycle (start once, stop with a
  deadline, the thread's exception raised by ``stop()``).

``tests/test_layout.py`` holds the rule: ``shared`` imports only the standard library (and
itself); the four packages may import it, never each other.
"""
