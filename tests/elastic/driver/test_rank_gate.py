"""The rank gate (``elastic.driver.rank_gate.RankGate``): a rank request waits while a world is
adopted, goes on once it opens, and is refused once the adoption failed."""
from __future__ import annotations

import threading

from elastic.driver.rank_gate import CLOSED, OPEN, REFUSING, RankGate


def test_the_gate_is_open_unless_closed():
    assert RankGate().wait(0) == OPEN


def test_a_request_waits_while_closed_and_goes_on_when_the_gate_opens():
    gate = RankGate()
    gate.close()
    assert gate.wait(0.05) == CLOSED
    seen: list[str] = []
    asker = threading.Thread(target=lambda: seen.append(gate.wait(60)))
    asker.start()
    gate.open()
    asker.join(60)
    assert seen == [OPEN]


def test_a_request_waiting_when_the_adoption_fails_is_refused():
    gate = RankGate()
    gate.close()
    seen: list[str] = []
    asker = threading.Thread(target=lambda: seen.append(gate.wait(60)))
    asker.start()
    gate.refuse()
    asker.join(60)
    assert seen == [REFUSING]
