"""The lease's wire format, written once: what a worker's lease wrapper
(``elastic.worker.lease``) asks the driver's rendezvous server, and what the project's driver
(``elastic.driver.lease_answers``) answers.

- ``GET /elastic-run-lease/<run id>`` (``-`` without a run id), on one kept connection.
- ``200``: the driver of that run (or a driver without a run id) runs: the lease is renewed.
- ``OTHER_RUN`` (410): a driver of another run answers at that address: no renewal.
- Any other answer (404 from a driver without the project's answer, plain horovodrun): the
  driver runs: renewed, as before the run id.
- ``GET /elastic-run-lease/<run id>/adopt/<host>/<slot>/<pid>`` (``adopt_path``): asked instead
  by a wrapper whose launcher is gone (its session ended or its driver fell silent) while it
  waits to be adopted. Only ``200`` renews it: a driver that took over that very process
  (host, local rank, the wrapper's pid) of that run. Every other driver answers ``OTHER_RUN``:
  the one that started it counts it as exited once its session is gone.
- ``GET <adopt_path>/exit/<code>`` (``exit_path``): an adopted wrapper's training ended with
  ``code`` (0-255, the wrapper's own exit code: 128+N for signal N). ``200`` from the driver
  that adopted it (it counts the worker as exited with that code, once, however often it is
  told): no ssh session tells that driver of the exit. ``OTHER_RUN`` from any other.

Plain constants, standard library only: the wrapper runs before anything else on a worker.
"""
import re

from shared.environment import ELASTIC_RUN_ID

RUN_ID_ENV = ELASTIC_RUN_ID  # elastic-run's run id, in horovodrun's and every worker's environment
SCOPE = "elastic-run-lease"
NO_RUN_ID = "-"
OTHER_RUN = 410


def lease_path(run_id: str | None) -> str:
    return f"/{SCOPE}/{run_id or NO_RUN_ID}"


ADOPT = "adopt"
_PART = re.compile(r"^[A-Za-z0-9._-]{1,253}$")


def adopt_path(run_id: str | None, host: str, slot: int, pid: int) -> str:
    """The question of a wrapper waiting to be adopted; ValueError for a host that is not a
    plain name or address (it goes into a URL path)."""
    if not _PART.match(host) or host in (".", ".."):
        raise ValueError(f"not a host name: {host!r}")
    return f"/{SCOPE}/{run_id or NO_RUN_ID}/{ADOPT}/{host}/{int(slot)}/{int(pid)}"


EXIT = "exit"


def exit_path(claim: str, code: int) -> str:
    """The report of an adopted wrapper (``claim``: its ``adopt_path``) whose training exited
    ``code``; ValueError for a code outside 0-255."""
    if not 0 <= int(code) <= 255:
        raise ValueError(f"not an exit code: {code!r}")
    return f"{claim}/{EXIT}/{int(code)}"
