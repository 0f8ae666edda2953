"""The soak's fault schedule (pure): which fault comes next, drawn from a seeded generator.

``next_fault(rng, world, used)`` picks one of ``KINDS`` that the world allows (a fault that
removes a pod only above ``--min-np``, an added pod only below the cap), favouring kinds not
drawn yet so a short soak still covers many kinds, and ``gap(rng)`` the seconds before it. The
choice depends only on the generator and the world, so a seed replays the same schedule
whenever the world evolves the same way (the soak itself decides how many pods there are).

Kinds (what the soak does; what a real cluster shows):

- ``add``: a pod created (scale-up);
- ``delete``: a pod deleted with its grace (scale-down, drain: SIGTERM first);
- ``kill``: a pod deleted with grace 0 (OOM, ``--grace 0``: processes gone at once);
- ``freeze-notready``: every process of a pod stopped, then the pod marked NotReady (a vanished
  node: partition, kernel hang), later deleted;
- ``freeze-thaw``: every process of a pod stopped for a while, then continued, the pod left Ready
  (a VM pause, swap storm, long GIL hold): it may be lost, its host must get a worker again;
- ``flap``: the pod NotReady for a moment, then Ready again (a readiness blip within the grace);
- ``api-restart``: the Kubernetes API away for a few seconds, keeping state;
- ``daemon-kill``: the launcher's discovery daemon SIGKILLed;
- ``driver-stall``: the Horovod driver (horovodrun in the launcher) stopped for a few seconds;
- ``lossy``: a share of a pod's packets dropped for a while (iptables; this kernel has no netem,
  so no added delay);
- ``below-min``: pods deleted until the world is below ``--min-np``, then added back.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

KINDS = ("add", "delete", "kill", "freeze-notready", "freeze-thaw", "flap", "api-restart", "daemon-kill",
         "driver-stall", "lossy", "below-min")
REMOVES = frozenset({"delete", "kill", "freeze-notready", "freeze-thaw"})
UNUSED_WEIGHT = 4  # a kind not drawn yet is this many times as likely as one drawn before


@dataclass(frozen=True)
class World:
    """What the schedule may do now: ``pods`` healthy pods, between ``min_np`` and ``max_pods``."""

    pods: int
    min_np: int
    max_pods: int

    def __post_init__(self) -> None:
        if self.min_np < 1 or self.max_pods < self.min_np:
            raise ValueError(f"need 1 <= min_np <= max_pods, got min_np={self.min_np} max_pods={self.max_pods}")


def allowed(kind: str, world: World) -> bool:
    """Whether ``kind`` can be done to ``world`` without leaving the soak's bounds."""
    if kind == "add":
        return world.pods < world.max_pods
    if kind in REMOVES:
        return world.pods > world.min_np
    if kind == "below-min":
        return world.pods >= world.min_np
    return world.pods >= 1


def next_fault(rng: random.Random, world: World, used: set[str], kinds: tuple[str, ...] = KINDS) -> str:
    """The next fault's kind: one of ``kinds`` allowed for ``world``, those not in ``used``
    ``UNUSED_WEIGHT`` times as likely. Raises ``ValueError`` if none is allowed."""
    choices = [k for k in kinds if allowed(k, world)]
    if not choices:
        raise ValueError(f"no fault of {', '.join(kinds)} is possible with {world.pods} pod(s)")
    weights = [UNUSED_WEIGHT if k not in used else 1 for k in choices]
    return rng.choices(choices, weights=weights, k=1)[0]


def gap(rng: random.Random) -> float:
    """Seconds of plain training between one fault's recovery and the next fault."""
    return rng.uniform(2.0, 8.0)


def parse_kinds(text: str) -> tuple[str, ...]:
    """``--kinds`` (a comma list of ``KINDS``, or ``all``); ``ValueError`` naming a bad one."""
    if text == "all":
        return KINDS
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise ValueError(f"--kinds wants a comma list of {', '.join(KINDS)} (or all), got {text!r}")
    return kinds
