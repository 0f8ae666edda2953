"""The driver's lease answers (elastic.driver.lease_answers) with the wrapper's Renewer
(elastic.worker.lease), on Horovod's real rendezvous server: one kept connection, the run id
in each question, another run's driver never renews."""
from __future__ import annotations

import select

import pytest
from horovod.runner.elastic.rendezvous import create_rendezvous_handler
from horovod.runner.http.http_server import RendezvousHandler, RendezvousServer

from elastic.driver import lease_answers
from elastic.worker.lease import Renewer
from tests.waiting import wait_for


@pytest.fixture
def driver(monkeypatch):
    """Horovod's rendezvous server answering the lease of run ``run-a``; its port."""
    monkeypatch.setattr(RendezvousHandler, "do_GET", RendezvousHandler.do_GET)  # undone after
    lease_answers.install("run-a")
    server = RendezvousServer()
    port = server.start(create_rendezvous_handler(driver=None))
    yield port
    server.stop()


def test_renewals_of_this_run_go_over_one_kept_connection(driver):
    renewer = Renewer("127.0.0.1", driver, run_id="run-a")
    try:
        assert renewer.ask()
        sock = renewer._conn.sock
        for _ in range(5):
            assert renewer.ask()
        assert renewer._conn is not None and renewer._conn.sock is sock
    finally:
        renewer._close()


def test_another_runs_driver_never_renews(driver):
    renewer = Renewer("127.0.0.1", driver, run_id="run-b")
    try:
        before = renewer.renewed
        assert not renewer.ask()
        assert renewer.renewed == before
    finally:
        renewer._close()


def test_a_wrapper_without_a_run_id_is_answered(driver):
    renewer = Renewer("127.0.0.1", driver)
    try:
        assert renewer.ask()
    finally:
        renewer._close()


def test_a_connection_the_driver_closed_is_replaced_at_once(driver, monkeypatch):
    monkeypatch.setattr(lease_answers, "IDLE_SECONDS", 0.2)
    renewer = Renewer("127.0.0.1", driver, run_id="run-a")
    try:
        assert renewer.ask()
        sock = renewer._conn.sock
        wait_for(lambda: select.select([sock], [], [], 0)[0], 30, "the driver to close the idle connection")
        assert renewer.ask()  # the closed one fails, a new one is answered
        assert renewer._conn.sock is not sock
    finally:
        renewer._close()


def test_other_requests_are_horovods(driver):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", driver, timeout=30)
    try:
        conn.request("GET", "/some-scope/some-key")
        assert conn.getresponse().status == 404
    finally:
        conn.close()


def test_only_an_adopted_process_is_answered_and_the_waiting_are_named(driver):
    """A wrapper waiting to be adopted is refused by the driver that started it (same run) and
    kept as a claim; once adopted it is answered, and let go it is refused again."""
    from elastic.driver.lease_answers import Claim, _installed
    from shared.lease_wire import adopt_path
    renewer = Renewer("127.0.0.1", driver, run_id="run-a")
    try:
        renewer.claim(adopt_path("run-a", "10.0.0.7", 1, 4242))
        assert not renewer.ask() and renewer.adopted_at is None
        claim = Claim("run-a", "10.0.0.7", 1, 4242)
        assert set(_installed.waiting()) == {claim}
        _installed.adopt(claim)
        assert renewer.ask() and renewer.adopted_at is not None
        _installed.release(claim)
        assert not renewer.ask()
    finally:
        renewer._close()


@pytest.mark.parametrize("asked", ["run-a/adopt/../0/1", "run-a/adopt/h/x/1", "run-a/adopt/h/0", "a b/adopt/h/0/1",
                                   "run-a/adopt/h/0/1/2", "run-a/adopt/h/0/99999999999", "run-a/adopt//0/1"])
def test_a_malformed_claim_is_refused_and_not_kept(asked):
    answers = lease_answers.Answers("run-a")
    assert answers.status(asked) == 410
    assert answers.waiting() == {}


def test_claims_kept_are_bounded(monkeypatch):
    monkeypatch.setattr(lease_answers, "MAX_WAITING", 3)
    answers = lease_answers.Answers("run-a")
    for pid in range(10):
        assert answers.status(f"run-a/adopt/h/0/{pid}") == 410
    assert len(answers.waiting()) == 3


def test_an_adopted_wrappers_exit_is_taken_once_and_a_strangers_is_refused():
    answers = lease_answers.Answers("run-b")
    claim = lease_answers.Claim("run-a", "worker-1", 0, 4242)
    report = "run-a/adopt/worker-1/0/4242/exit/3"
    assert answers.status(report) == 410, "an exit of a process it never adopted"
    assert answers.take_exits() == []
    answers.adopt(claim)
    assert answers.status(report) == 200
    assert answers.status(report) == 200, "the same report told again (its answer was lost)"
    assert answers.take_exits() == [(claim, 3)]
    assert answers.take_exits() == []
    assert answers.status("run-a/adopt/worker-1/0/4242") == 410, "an exited process is adopted no more"
    assert answers.status("run-a/adopt/worker-1/0/4242/exit/4") == 410, "another code for the same process"


@pytest.mark.parametrize("asked", ["run-a/adopt/worker-1/0/4242/exit/256", "run-a/adopt/worker-1/0/4242/exit/-1",
                                   "run-a/adopt/worker-1/0/4242/exit/", "run-a/adopt/worker-1/0/4242/exit/1/2",
                                   "run-a/adopt/wor ker/0/4242/exit/0", "run-a/exit/0"])
def test_a_malformed_exit_report_is_refused(asked):
    answers = lease_answers.Answers("run-a")
    answers.adopt(lease_answers.Claim("run-a", "worker-1", 0, 4242))
    assert answers.status(asked) == 410
    assert answers.take_exits() == []


def test_the_wrapper_reports_an_exit_to_the_driver_that_adopted_it(driver):
    answers = lease_answers.install("run-a")  # the one the driver answers with
    renewer = Renewer("127.0.0.1", driver, run_id="run-a")
    renewer.claim("/elastic-run-lease/run-a/adopt/worker-1/0/4242")
    try:
        assert not renewer.report_exit(5, within=1.0), "not adopted: the driver does not take it"
        answers.adopt(lease_answers.Claim("run-a", "worker-1", 0, 4242))
        assert renewer.report_exit(5, within=1.0)
        assert answers.take_exits() == [(lease_answers.Claim("run-a", "worker-1", 0, 4242), 5)]
    finally:
        renewer._close()
