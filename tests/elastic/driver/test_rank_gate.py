"""The rank gate (``elastic.driver.rank_gate.RankGate``): a rank request waits while a world is
adopted, goes on once it opens, and is refused once the adoption failed."""
from __future__ import annotations

import threading

import pytest

from elastic.driver.rank_gate import CLOSED, OPEN, REFUSING, RankGate


def test_the_gate_is_open_unless_closed():
    assert RankGate().wait(0) == OPEN


@pytest.mark.parametrize("settle, seen", [(RankGate.open, OPEN), (RankGate.refuse, REFUSING)])
def test_a_request_waits_while_closed_and_goes_on_as_the_adoption_settles(settle, seen):
    """Closed (adopting), a request waits; the gate opening lets it go on, the adoption failing
    refuses it."""
    gate = RankGate()
    gate.close()
    assert gate.wait(0.05) == CLOSED
    got: list[str] = []
    asker = threading.Thread(target=lambda: got.append(gate.wait(60)))
    asker.start()
    settle(gate)
    asker.join(60)
    assert got == [seen]
