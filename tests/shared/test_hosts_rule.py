"""One host rule (``shared.hosts.host_ok``) and every place that decides a host: the daemon
(``discovery.hosts.servable`` and, for IPv4, ``check_ip``), ``discover-hosts`` and
``elastic.common.hostlist.validate_host_name`` (which also allows ``_`` in a name, for the
user's own ssh aliases, and nothing else): the copies that remain agree on every string."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from discovery import discover_hosts
from discovery.errors import BadHost
from discovery.hosts import check_ip, servable
from elastic.common.hostlist import validate_host_name
from elastic.errors import ConfigError
from shared.hosts import host_ok

octet = st.one_of(st.integers(0, 300).map(str), st.sampled_from(["00", "01", "007", "", "-1", "1a"]))
ipv4ish = st.lists(octet, min_size=1, max_size=5).map(".".join)
namish = st.text(alphabet="abcXYZ019-._:_ \u00e9\n%", min_size=0, max_size=20)
long_names = st.integers(60, 260).map(lambda n: ("a" * 62 + ".") * (n // 63) + "b" * (n % 63 or 1))
hosts = st.one_of(ipv4ish, namish, long_names)


def _elastic_ok(host: str) -> bool:
    try:
        validate_host_name(host)
        return True
    except ConfigError:
        return False


def _daemon_ipv4_ok(host: str) -> bool:
    try:
        return check_ip(host) == host and ":" not in host
    except BadHost:
        return False


@settings(max_examples=3000, deadline=None)
@given(hosts)
def test_every_copy_decides_a_host_as_the_one_rule_does(host: str) -> None:
    want = host_ok(host)
    assert discover_hosts.host_ok(host) is want
    assert servable(host) is want
    assert _elastic_ok(host) is host_ok(host.replace("_", "x"))
    if host.split(".")[-1].isdigit():  # an address: the daemon's IP check says the same
        assert _daemon_ipv4_ok(host) is want


@pytest.mark.parametrize("host, ok", [
    ("10.0.0.1", True), ("223.255.255.254", True), ("0.1.2.3", False), ("224.0.0.1", False),
    ("240.0.0.1", False), ("255.255.255.255", False), ("10.0.0.01", False), ("10.1", False),
    ("worker-0.svc", True), ("-a", False), ("a-", False), ("a..b", False), ("a.1", False),
    ("a" * 63, True), ("a" * 64, False), ("a_b", False), ("::1", False), ("", False),
])
def test_the_rule(host: str, ok: bool) -> None:
    assert host_ok(host) is ok
