"""The lease's wire format, written once: what a worker's lease wrapper
(``elastic.worker.lease``) asks the driver's rendezvous server, and what the project's driver
(``elastic.driver.lease_answers``) answers.

- ``GET /elastic-run-lease/<run id>`` (``-`` without a run id), on one kept connection.
- ``200``: the driver of that run (or a driver without a run id) runs: the lease is renewed.
- ``OTHER_RUN`` (410): a driver of another run answers at that address: no renewal.
- Any other answer (404 from a driver without the project's answer, plain horovodrun): the
  driver runs: renewed, as before the run id.

Plain constants, standard library only: the wrapper runs before anything else on a worker.
"""
from shared.environment import ELASTIC_RUN_ID

RUN_ID_ENV = ELASTIC_RUN_ID  # elastic-run's run id, in horovodrun's and every worker's environment
SCOPE = "elastic-run-lease"
NO_RUN_ID = "-"
OTHER_RUN = 410


def lease_path(run_id: str | None) -> str:
    return f"/{SCOPE}/{run_id or NO_RUN_ID}"
