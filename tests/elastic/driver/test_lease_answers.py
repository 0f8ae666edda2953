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
