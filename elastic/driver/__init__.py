"""The elastic driver's own code: what runs inside horovodrun's process (never imports the
launcher, ``elastic.launch``: the layout test holds it).

- ``hvdrun``: the ``horovodrun`` command (``main``: Horovod's launcher with this package's
  driver installed) and ``python -m elastic.driver.hvdrun``, elastic-run's, fed by ``push``
  (discovery by long poll of the daemon, no process per poll).
- ``entry``: writes the venv's (and the image's) ``horovodrun`` to run ``hvdrun.main``.
- ``elastic_driver``: the fork's ``ElasticDriver``, subclassed to ask the cores below.
- ``lease_answers``: the driver's side of the workers' lease.

The decisions are pure cores with no threads, no clock reads, no sockets and no locks: they
take timestamped observations and return decisions, which the driver's threads execute.

- ``liveness``: the failure detector (which workers of the world are lost for silence, when
  the driver suspects itself, which pings go out).
- ``cooldowns``: which hosts get no worker for a while (a quarantine after a silent worker,
  a refusal after a failed joiner) and when each serves again.

``elastic.simulation`` runs these cores under thousands of seeded fault schedules.
"""
