"""The fence publishes where its leadership ends (``Fence(..., valid_until_file=...)``) for
horovodrun's driver (``elastic.driver.leading``): written before ``start`` returns, moved on at
each renewal, never later than the elector's own; the driver reading it leads now and not
once the monotonic clock passes it, as after a pause. A real elector on a local cluster's
Lease API."""
import os
import threading

import pytest
from kubernetes import client, config

from elastic.driver.leading import still_leads
from elastic.launch.fencing import Fence
from elastic.leader.elector import LeaseElector
from elastic.leader.rules import Timings
from localcluster.testing import running_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.slow
TIMINGS = Timings(lease_duration=2, renew_deadline=1.5, retry_period=0.2)


def test_the_fence_publishes_its_end_and_the_driver_stops_acting_past_it(tmp_path):
    with running_cluster(tmp_path / "cluster") as lc:
        api = client.CoordinationV1Api(config.new_client_from_config(config_file=str(lc.kubeconfig)))
        elector = LeaseElector(api, "ns", "job-fence", "a", TIMINGS)
        assert elector.campaign(threading.Event(), lambda _holder: None) is None and elector.leading()
        path = tmp_path / "leader-valid-until"
        exits: list[int] = []
        fence = Fence(elector, "job-fence", exit=exits.append, valid_until_file=path)
        fence.start()
        try:
            first = float(path.read_text())
            assert first <= elector.valid_until
            env = {"ELASTIC_LEADER_VALID_UNTIL": str(path)}
            assert still_leads(env)
            moved = wait_for(lambda: float(path.read_text()) > first and float(path.read_text()), 60,
                             "the published end to move on with a renewal")
            assert moved <= elector.valid_until
            assert not still_leads(env, clock=lambda: moved + 0.001)  # woken past it
            assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
        finally:
            fence.stop()
        assert not exits, "the fence tripped while leading"
