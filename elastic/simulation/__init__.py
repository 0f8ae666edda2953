"""A deterministic simulation of the elastic driver's failure handling.

Seeded, in virtual time: the driver's real decision cores (``elastic.driver.liveness``,
``elastic.driver.cooldowns``) run against simulated workers, network and driver process, under
random fault schedules that combine freezes (one process, a whole pod, a majority, two pods
within seconds), kills, slow and lost answers, driver stalls, joiners that fail or hang at
start. The invariants (``invariants``) are checked against the ground truth of each run.

- ``clock``: the virtual clock and its event queue.
- ``faults``: the fault kinds and the seeded schedule.
- ``rules``: the driver's I/O settings and rules, today's and the old ones (to show that the
  simulation finds what the old ones broke).
- ``model``: the simulated world: hosts, workers, the driver's ping lanes, the lease.
- ``invariants``: what must hold, checked against the model's record.
- ``run``: one schedule (``simulate``) and many (``sweep``).
- ``cli``: ``scripts/simulate``.
"""
