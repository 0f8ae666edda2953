"""Pure parts of ssh-bootstrap: host lists, pinning decisions, rendered files, keys, tables."""
from __future__ import annotations

import base64
import io
import json
import stat

import paramiko
import pytest
import yaml

from elastic.common.hostlist import Host, parse_entry, parse_host_list, parse_hosts_file, render_hostfile
from elastic.common.table import human_bytes, render_table
from elastic.errors import ConfigError
from elastic.ssh.config import BootstrapDir, horovodrun_args, horovodrun_env, render_ssh_config
from elastic.ssh.keys import generate_keypair, public_fingerprint, secret_manifest, write_keys
from elastic.ssh.known_hosts import KnownHosts, fingerprint, host_key_name, pin

GOOD_ENTRIES = [
    ("worker-0", Host("worker-0", 1)),
    ("10.1.2.3:4", Host("10.1.2.3", 4)),
    ("node_1.example.com slots=2", Host("node_1.example.com", 2)),
    ("  127.0.0.5  ", Host("127.0.0.5", 1)),
]
BAD_ENTRIES = [
    ("-oProxyCommand=sh", "looks like an option"),
    ("host;rm -rf /", "bad host entry"),
    ("-o ProxyCommand=x", "looks like an option"),
    ("a$(id)", "is not a host name: characters other than"),
    ("user@host", "is not a host name: characters other than"),
    ("`x`", "is not a host name: characters other than"),
    ("h:0", "slots must be >= 1"),
    ("h:x", "bad slots"),
    ("fe80::1", "IPv6"),
    ("a..b", "is not a host name: empty label"),
    ("10.0.0.01", "not an IPv4 address in canonical form"),
    ("224.0.0.1", "not an IPv4 unicast address"),
    ("", "empty"),
]


@pytest.mark.parametrize("text,expected", GOOD_ENTRIES)
def test_host_entries_that_are_accepted(text, expected):
    assert parse_entry(text) == expected


@pytest.mark.parametrize("text,message", BAD_ENTRIES)
def test_host_entries_that_look_like_options_or_shell_are_refused(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_entry(text)


def test_host_list_and_file_forms():
    assert parse_host_list("a,b:2, c") == [Host("a"), Host("b", 2), Host("c")]
    text = "# discover-hosts output\n10.0.0.1:2\n\n10.0.0.2 slots=3  # comment\n"
    hosts = parse_hosts_file(text)
    assert hosts == [Host("10.0.0.1", 2), Host("10.0.0.2", 3)]
    assert render_hostfile(hosts) == "10.0.0.1 slots=2\n10.0.0.2 slots=3\n"
    with pytest.raises(ConfigError, match="listed twice"):
        parse_host_list("a,a:2")
    with pytest.raises(ConfigError, match="empty"):
        parse_host_list(" , ")


def _key(seed: int) -> str:
    return base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + bytes([seed]) * 32).decode()


def test_pin_decisions_new_same_changed():
    name = host_key_name("10.0.0.1", 2222)
    assert name == "[10.0.0.1]:2222" and host_key_name("h", 22) == "h"
    first = pin(KnownHosts(), name, "ssh-ed25519", _key(1))
    assert first.status == "new"
    again = pin(first.known_hosts, name, "ssh-ed25519", _key(1))
    assert again.status == "same" and again.known_hosts == first.known_hosts
    changed = pin(first.known_hosts, name, "ssh-ed25519", _key(2))
    assert changed.status == "changed"
    assert changed.pinned_fingerprint == fingerprint(_key(1)) and changed.fingerprint == fingerprint(_key(2))
    assert changed.known_hosts == first.known_hosts  # the old pin stays
    other_port = pin(first.known_hosts, host_key_name("10.0.0.1", 22), "ssh-ed25519", _key(2))
    assert other_port.status == "new"


def test_known_hosts_round_trip_keeps_foreign_lines():
    text = ("# comment\n|1|hashed|entry ssh-ed25519 AAAA\n@cert-authority * ssh-ed25519 AAAA\n"
            "h1,h2 ssh-ed25519 " + _key(3) + "\n")
    known = KnownHosts.parse(text)
    assert known.keys_for("h2") == {"ssh-ed25519": _key(3)}
    assert KnownHosts.parse(known.render()) == known
    assert "|1|hashed|entry" in known.render() and "@cert-authority" in known.render()


def test_ssh_config_pins_strictly_and_quotes_paths():
    text = render_ssh_config("/keys/my key", "/run/ssh/known_hosts", 2222, "root")
    options = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in text.splitlines()[2:]}
    assert options["StrictHostKeyChecking"] == "yes"
    assert options["UserKnownHostsFile"] == "/run/ssh/known_hosts"
    assert options["GlobalKnownHostsFile"] == "/dev/null"
    assert options["IdentityFile"] == '"/keys/my key"'
    assert options["Port"] == "2222" and options["User"] == "root"
    with pytest.raises(ConfigError, match="cannot be written into an ssh_config"):
        render_ssh_config('/a"b', "/k", 22)


def test_horovodrun_args_and_env_need_a_bootstrapped_dir(tmp_path):
    d = BootstrapDir(tmp_path)
    with pytest.raises(ConfigError, match="run 'ssh-bootstrap hosts"):
        horovodrun_args(d)
    d.settings.write_text(json.dumps({"identity": "/k/id", "port": 2222, "user": "root"}))
    assert horovodrun_args(d) == ["--ssh-port", "2222", "--ssh-identity-file", "/k/id"]
    assert horovodrun_args(d, hostfile=True)[-2:] == ["--hostfile", str(tmp_path / "hostfile")]
    env = horovodrun_env(d, {"PATH": "/usr/bin", "HOME": "/root"})
    assert env == {"PATH": f"{tmp_path}/bin:/usr/bin", "HOME": "/root", "ELASTIC_SSH_CONFIG": f"{tmp_path}/ssh_config"}


def test_secret_manifest_is_a_v1_secret_with_a_loadable_key():
    pair = generate_keypair("job-1")
    doc = yaml.safe_load(secret_manifest(pair, "s", "ns"))
    assert (doc["apiVersion"], doc["kind"], doc["type"]) == ("v1", "Secret", "Opaque")
    assert doc["metadata"]["name"] == "s" and doc["metadata"]["namespace"] == "ns"
    private = base64.b64decode(doc["data"]["id_ed25519"]).decode()
    public = base64.b64decode(doc["data"]["id_ed25519.pub"]).decode()
    key = paramiko.Ed25519Key.from_private_key(io.StringIO(private))
    assert public.split()[:2] == [key.get_name(), key.get_base64()]
    assert public.endswith(" job-1\n")
    assert "PRIVATE" not in repr(pair)
    # The official client's model reads it as a V1Secret.
    from kubernetes.client import ApiClient

    model = ApiClient().deserialize(json.dumps(doc), "V1Secret", "application/json")
    assert (model.kind, model.metadata.name, model.type) == ("Secret", "s", "Opaque")
    assert set(model.data) == {"id_ed25519", "id_ed25519.pub"}


def test_write_keys_modes_and_refusal_to_overwrite(tmp_path):
    pair = generate_keypair()
    files = write_keys(tmp_path / "k", pair)
    assert stat.S_IMODE(files.private.stat().st_mode) == 0o600
    assert stat.S_IMODE(files.secret.stat().st_mode) == 0o600
    assert files.public.read_text() == pair.public_line
    with pytest.raises(ConfigError, match="use --force"):
        write_keys(tmp_path / "k", generate_keypair())
    assert files.public.read_text() == pair.public_line
    other = generate_keypair()
    write_keys(tmp_path / "k", other, force=True)
    assert public_fingerprint(files.public.read_text()) == public_fingerprint(other.public_line)


def test_table_alignment_and_sizes():
    text = render_table(["A", "LONGER"], [["x", 1], ["yyyy", ""]])
    assert text.splitlines() == ["A     LONGER", "x     1", "yyyy"]
    with pytest.raises(ValueError, match=r"row has 2 cells, table has 1 columns: \['x', 'y'\]"):
        render_table(["A"], [["x", "y"]])
    assert [human_bytes(n) for n in (0, 1536, 3 * 2**20)] == ["0 B", "1.5 KiB", "3.0 MiB"]
