"""Hostile pods: whatever a pod's status says, no value reaches horovodrun's shell unquoted,
and the good pods keep being served.

The chain is the real one: local-cluster API -> discovery-daemon -> ``/hosts`` ->
``discover-hosts`` (the installed script) -> Horovod's own ``HostDiscoveryScript`` parser ->
Horovod's own ssh command builder (``horovod.runner.util.remote.get_remote_command``).
"""
from __future__ import annotations

import shlex
import string
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from discovery.discover_hosts import host_ok, validate
from discovery.hosts import Rules, check_host, classify, render_lines, servable
from tests.daemons import ROOT, daemon_env, fake_pod

HOSTILE = [
    "$(touch /tmp/pwned)", "10.0.0.1;id", "10.0.0.1&&id", "10.0.0.1|id", "`id`", "10.0.0.1>x",
    "-oProxyCommand=touch /tmp/pwned", "--help", "-p1", "10.0.0.1 -oProxyCommand=x", "10.0.0.1:2",
    "10.0.0.1\nevil.example:1", "10.0.0.1\r", "10.0.0.1\x00", "10.0.0.1\t", " 10.0.0.1", "10.0.0.1 ",
    "10.0.0.1\x0b", "10.0.0.1\x0c", "10.0.0.1\x1c", "10.0.0.1\u2028", "10.0.0.1\u2029", "10.0.0.1\x85",
    "\u0661\u0660.0.0.1", "10.0.0.\u00b2", "1" * 300, "10." * 200 + "1", "fe80::1%eth0", "::1%lo",
    "fe80::1%25eth0", "010.0.0.1", "0x7f.0.0.1", "2130706433", "0.0.0.0", "255.255.255.255",
    "224.0.0.1", "10.0.0.256", "10.0.0", "host'name", 'host"name', "h\\x", "~root", "{a,b}",
    "a\x1b[31m", "10.0.0.1#", "*", "-", "a..b", "user@10.0.0.1", "\u202e1.0.0.01",
]
GOOD_IPS = ["10.9.0.1", "10.9.0.2"]


def horovod_hosts(stdout: str) -> dict[str, int]:
    """What Horovod makes of discover-hosts' output: its own parser, fed our stdout."""
    from horovod.runner.elastic.discovery import HostDiscoveryScript

    class Fed(HostDiscoveryScript):
        def _execute_discovery_script(self) -> str:  # the parse is Horovod's; the run was ours
            return stdout
    return Fed("discover-hosts", 1).find_available_hosts_and_slots()


def assert_no_shell_word_leaks(host: str) -> None:
    """Horovod's ssh command string, split as its shell splits it, has ``host`` as one plain
    word in the host position -- nothing for the shell to expand, nothing read as an option."""
    from horovod.runner.util.remote import get_remote_command
    cmd = get_remote_command("true", host, port=2222, identity_file="/k")
    assert shlex.quote(host) == host, f"{host!r} needs quoting in {cmd!r}"
    assert not host.startswith("-")
    words = shlex.split(cmd)
    assert words == ["ssh", "-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no", host,
                     "-p", "2222", "-i", "/k", "true"]


def test_at_least_thirty_hostile_values() -> None:
    assert len(set(HOSTILE)) >= 30


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_pod_ip_is_skipped_by_the_rule(value: str) -> None:
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u"},
           "status": {"phase": "Running", "podIP": value,
                      "conditions": [{"type": "Ready", "status": "True"}]}}
    verdict = classify(pod, Rules())
    assert type(verdict).__name__ == "Skipped", verdict
    assert verdict.reason.startswith("bad address in status.podIP: ")
    assert verdict.reason.isprintable() and "\n" not in verdict.reason and len(verdict.reason) < 250
    for mode in ("ip", "dns", "name"):
        with pytest.raises(ValueError):
            check_host(value, mode)
    assert not servable(value) and not host_ok(value)


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=80) | st.text(alphabet=string.printable, min_size=1, max_size=30))
def test_any_pod_ip_served_is_a_plain_word(value: str) -> None:
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u"},
           "status": {"phase": "Running", "podIP": value,
                      "conditions": [{"type": "Ready", "status": "True"}]}}
    verdict = classify(pod, Rules())
    if type(verdict).__name__ != "Host":
        return
    body = render_lines([verdict])
    assert validate(body.encode(), "t") == body.encode()
    hosts = horovod_hosts(body)
    assert hosts == {verdict.host: 1}
    assert_no_shell_word_leaks(verdict.host)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60), st.text(max_size=8))
def test_discover_hosts_never_prints_a_line_horovod_reads_differently(host: str, slots: str) -> None:
    warnings: list[str] = []
    body = f"10.9.0.1:1\n{host}:{slots}\n".encode("utf-8", "surrogatepass")
    try:
        out = validate(body, "t", warnings).decode()
    except Exception as e:  # only whole-answer failures (not UTF-8) may raise
        assert type(e).__name__ == "Failure"
        return
    assert out.startswith("10.9.0.1:1\n")
    parsed = horovod_hosts(out)
    assert len(parsed) == out.count("\n")  # one Horovod host per printed line
    for h, n in parsed.items():
        assert 1 <= n <= 1024
        assert_no_shell_word_leaks(h)


def test_hostile_pods_end_to_end_through_daemon_discover_hosts_and_horovod(cluster, daemon) -> None:
    for i, ip in enumerate(GOOD_IPS):
        fake_pod(cluster, f"good-{i}", ip)
    for i, value in enumerate(HOSTILE):
        fake_pod(cluster, f"bad-{i}", value)
    d = daemon(cluster, "--address", "ip")
    d.wait_for(lambda: len(d.json()["skipped"]) == len(HOSTILE), 60, "every hostile pod skipped")
    doc = d.json()
    assert sorted(h["host"] for h in doc["hosts"]) == GOOD_IPS
    for skipped in doc["skipped"]:
        assert skipped["pod"].startswith("bad-")
        assert skipped["reason"].startswith("bad address in status.podIP: ")
        assert skipped["reason"].isprintable()
    assert d.metric('discovery_pods_skipped{reason="bad address in status.podIP"}') == len(HOSTILE)
    d.wait_for(lambda: sum('"pod skipped"' in line for line in d.lines) >= len(HOSTILE), 30,
               "a log line per skipped pod")

    def discover() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROOT / "discovery/bin/discover-hosts")], capture_output=True,
                              text=True, env=daemon_env({"DISCOVERY_URL": d.url}), cwd=ROOT, timeout=60)
    proc = discover()
    assert proc.returncode == 0, proc.stderr
    hosts = horovod_hosts(proc.stdout)
    assert hosts == {ip: 1 for ip in GOOD_IPS}
    for host in hosts:
        assert_no_shell_word_leaks(host)

    # one more good pod joins: the job keeps scaling whatever the bad pods say
    fake_pod(cluster, "good-late", "10.9.0.3")
    d.wait_host_set([f"{ip}:1" for ip in GOOD_IPS + ["10.9.0.3"]])
    proc = discover()
    assert proc.returncode == 0 and horovod_hosts(proc.stdout) == {ip: 1 for ip in GOOD_IPS + ["10.9.0.3"]}
