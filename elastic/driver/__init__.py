"""The elastic driver's own code: what runs inside horovodrun's process.

The decisions are pure cores with no threads, no clock reads, no sockets and no locks: they
take timestamped observations and return decisions, which the driver's threads execute.

- ``liveness``: the failure detector (which workers of the world are lost for silence, when
  the driver suspects itself, which pings go out).
- ``cooldowns``: which hosts get no worker for a while (a quarantine after a silent worker,
  a refusal after a failed joiner) and when each serves again.

``elastic.simulation`` runs these cores under thousands of seeded fault schedules.
"""
