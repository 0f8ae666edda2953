"""Admission runs the real prepare command once per uid, bounded, with retries."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from discovery.admission import Admission, PrepareSettings
from discovery.errors import ConfigError
from discovery.hosts import pods_to_hosts
from discovery.table import ADMITTED, PREPARING
from tests.discovery.podspec import pod

SCRIPT = r"""
import os, sys, time
log, sep, host = sys.argv[1:]  # the daemon appends "--" and the host
if sep != "--":
    sys.exit("no -- before the host")
with open(log, "a") as f:
    f.write(f"start {host}\n")
n = sum(1 for line in open(log) if line == f"start {host}\n")
time.sleep(0.2)
fails = int(os.environ.get("FAILS_" + host.replace(".", "_"), "0"))
with open(log, "a") as f:
    f.write(f"end {host}\n")
if n <= fails:
    print(f"not yet ({n})", file=sys.stderr)
    sys.exit(3)
"""


def _hosts(n: int):  # type: ignore[no-untyped-def]
    return pods_to_hosts([pod(f"w{i}", ip=f"10.0.0.{i}") for i in range(n)]).hosts


def _admission(settings: PrepareSettings) -> tuple[Admission, asyncio.Event]:
    """An Admission whose ``on_change`` (its public seam) sets the returned event."""
    changed = asyncio.Event()
    return Admission(settings, changed.set), changed


async def _settle(adm: Admission, changed: asyncio.Event, hosts, timeout: float = 20) -> dict[str, str]:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        states = {h.host: adm.request(h) for h in hosts}
        if PREPARING not in states.values():
            return states
        changed.clear()
        await asyncio.wait_for(changed.wait(), deadline - loop.time())


def test_once_per_uid_bounded_and_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "prep.py"
    script.write_text(SCRIPT)
    log = tmp_path / "log"
    monkeypatch.setenv("FAILS_10_0_0_1", "1")   # fails once, then succeeds
    monkeypatch.setenv("FAILS_10_0_0_2", "99")  # never succeeds
    settings = PrepareSettings.parse(f"{sys.executable} {script} {log}", concurrency=2, retries=2,
                                     retry_delay=0.05)

    async def scenario() -> dict[str, str]:
        adm, changed = _admission(settings)
        hosts = _hosts(5)
        states = await _settle(adm, changed, hosts)
        again = await _settle(adm, changed, hosts)  # asking again runs nothing new
        assert again == states
        await adm.aclose()
        return states

    states = asyncio.run(scenario())
    assert states["10.0.0.0"] == ADMITTED and states["10.0.0.1"] == ADMITTED
    assert states["10.0.0.2"].startswith("prepare failed after 3 attempts: exit 3: not yet (3)")
    lines = log.read_text().splitlines()
    starts = [line.split()[1] for line in lines if line.startswith("start")]
    assert starts.count("10.0.0.0") == 1 and starts.count("10.0.0.1") == 2 and starts.count("10.0.0.2") == 3
    running = peak = 0
    for line in lines:  # never more than `concurrency` at once (how many overlapped is up to timing)
        running += 1 if line.startswith("start") else -1
        peak = max(peak, running)
    assert 1 <= peak <= 2


def test_missing_command_fails_with_reason(tmp_path: Path) -> None:
    settings = PrepareSettings.parse(str(tmp_path / "no-such-cmd"), retries=0)

    async def scenario() -> dict[str, str]:
        adm, changed = _admission(settings)
        states = await _settle(adm, changed, _hosts(1))
        await adm.aclose()
        return states

    assert "cannot run" in asyncio.run(scenario())["10.0.0.0"]


@pytest.mark.parametrize("cmd,msg", [("", "empty"), ("'unbalanced", "bad --prepare-cmd")])
def test_bad_command_is_a_config_error(cmd: str, msg: str) -> None:
    with pytest.raises(ConfigError, match=msg):
        PrepareSettings.parse(cmd)


def test_a_host_that_is_not_servable_is_never_passed_to_the_command(tmp_path: Path) -> None:
    """Even a ``Host`` built past ``classify`` (no path trusts another's check) never reaches
    the command: the prepare step fails with the value escaped, and nothing runs."""
    from discovery.hosts import Host
    script = tmp_path / "prep.py"
    script.write_text(SCRIPT)
    log = tmp_path / "log"
    settings = PrepareSettings.parse(f"{sys.executable} {script} {log}", retries=0)
    bad = Host(created="", namespace="default", pod="evil", host="--help", slots=1, uid="u1", ip="--help")

    async def scenario() -> str:
        adm, changed = _admission(settings)
        state = (await _settle(adm, changed, [bad]))["--help"]
        await adm.aclose()
        return state
    state = asyncio.run(scenario())
    assert state.startswith("prepare failed") and "refused to prepare a bad host '--help'" in state
    assert not log.exists()
