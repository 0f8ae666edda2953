"""elastic.leader.elector against a running local cluster through the official client: two
candidates of one Lease, one leads and the other stands by naming it; the leader stops
renewing (as when paused) and the standby leads once the Lease expired by its own
observation; the old leader's next read shows the new holder. A finished mark stops a standby."""
import threading

import pytest
from kubernetes import client, config

from elastic.leader.elector import LeaseElector
from elastic.leader.rules import Finished, Timings
from localcluster.testing import running_cluster
from tests.waiting import MIN_TIMEOUT

pytestmark = pytest.mark.slow
TIMINGS = Timings(lease_duration=2, renew_deadline=1.5, retry_period=0.2)


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("elector") / "cluster") as lc:
        yield client.CoordinationV1Api(config.new_client_from_config(config_file=str(lc.kubeconfig)))


class Campaign:
    """``elector.campaign`` in a thread: what it returned, who it stood by for."""

    def __init__(self, elector: LeaseElector):
        self.stop, self.standby, self.result = threading.Event(), [], []
        self.thread = threading.Thread(target=lambda: self.result.append(
            elector.campaign(self.stop, self.standby.append)), daemon=True)
        self.thread.start()

    def join(self):
        self.thread.join(MIN_TIMEOUT)
        assert not self.thread.is_alive(), "the campaign did not end"
        return self.result[0]


def test_one_leads_the_other_stands_by_then_takes_over_an_unrenewed_lease(api):
    a = LeaseElector(api, "ns", "job-1", "a", TIMINGS)
    b = LeaseElector(api, "ns", "job-1", "b", TIMINGS)
    assert Campaign(a).join() is None and a.leading()
    waiting = Campaign(b)
    assert waiting.join() is None and b.leading()  # a never renewed: b took over
    assert waiting.standby == ["a"]
    lease = api.read_namespaced_lease("job-1", "ns")
    assert lease.spec.holder_identity == "b" and lease.spec.lease_transitions == 1
    assert not a.leading()  # its renew deadline passed long ago
    a.attempt()  # its next read: b holds it; it did not write over b
    assert "held by b" in a.lost_reason()
    assert api.read_namespaced_lease("job-1", "ns").spec.holder_identity == "b"


def test_a_renewing_leader_keeps_the_lease_and_a_finished_mark_ends_the_standby(api):
    a = LeaseElector(api, "ns", "job-2", "a", TIMINGS)
    b = LeaseElector(api, "ns", "job-2", "b", TIMINGS)
    assert Campaign(a).join() is None
    stop = threading.Event()
    renewer = threading.Thread(target=a.renew, args=(stop,), daemon=True)
    renewer.start()
    waiting = Campaign(b)
    waiting.thread.join(3 * TIMINGS.lease_duration)  # three lease durations: a renews, b waits
    assert waiting.thread.is_alive() and a.leading() and waiting.standby == ["a"]
    stop.set()
    renewer.join(MIN_TIMEOUT)
    a.finish(0)
    assert waiting.join() == Finished("", 0) and not b.leading()
