"""The rsync flag policy: one set of flags for the launcher's push and a relay child's pull,
and a relay daemon whose settings agree with them (the runs themselves are in test_relay.py's
and test_symlinks.py's tests against pods)."""
from __future__ import annotations

import shlex

import pytest

from elastic.errors import ConfigError
from elastic.sync.manifest import HOST_FILES, SYMLINK_MODES
from elastic.sync.relay import PeerSource, pull_script, serve_script
from elastic.sync.remote import Layout
from elastic.sync.rsync import DAEMON_REFUSED, RsyncOptions, copy_flags, daemon_module_settings, link_flag, rsync_argv

LAYOUT = Layout("/data/ds")
PEER = PeerSource("10.0.0.5", 23456, "secret")


def _pull_argv(options: RsyncOptions, current: str = "v-1", checksum: bool = False) -> list[str]:
    """The rsync command line of a pull script, as the shell on the child splits it."""
    script = pull_script(LAYOUT, PEER, current, options, address="10.0.0.6", checksum=checksum)
    line = next(x for x in script.splitlines() if "--password-file" in x)
    return shlex.split(line)


@pytest.mark.parametrize("symlinks", SYMLINK_MODES)
@pytest.mark.parametrize("checksum", [False, True])
def test_push_and_pull_copy_with_the_same_flags(symlinks, checksum):
    """A pull from a peer's verified copy is told what a push is, but for the link flag where
    the mode was already applied to the copy (copy-unsafe: no unsafe link is left in it)."""
    options = RsyncOptions(bwlimit_kbps=300, symlinks=symlinks)
    push = rsync_argv("/src", "10.0.0.6", LAYOUT, "v-1", "ssh", options, checksum=checksum)
    pull = _pull_argv(options, checksum=checksum)
    assert push[1:push.index("-e")] == copy_flags(options, "v-1", checksum=checksum)
    assert pull[1:pull.index("--contimeout=10")] == copy_flags(options, "v-1", checksum=checksum, from_copy=True)
    pushed_link, pulled_link = link_flag(symlinks), link_flag(symlinks, from_copy=True)
    assert pushed_link in push and pulled_link in pull
    assert [f for f in push[1:push.index("-e")] if f != pushed_link] == \
        [f for f in pull[1:pull.index("--contimeout=10")] if f != pulled_link]
    assert ("--checksum" in pull) == checksum and "--bwlimit=300" in pull and "--link-dest=../v-1" in pull


def test_each_mode_keeps_the_links_its_manifest_lists():
    assert {m: link_flag(m) for m in SYMLINK_MODES} == {
        "refuse": "--safe-links", "copy-unsafe": "--copy-unsafe-links", "keep": "--links"}
    # from a verified copy: keep's links out of the tree are in the manifest and must arrive
    assert {m: link_flag(m, from_copy=True) for m in SYMLINK_MODES} == {
        "refuse": "--safe-links", "copy-unsafe": "--safe-links", "keep": "--links"}


@pytest.mark.parametrize("symlinks", SYMLINK_MODES)
def test_a_pull_never_asks_the_daemon_for_an_option_it_refuses(symlinks):
    flags = copy_flags(RsyncOptions(symlinks=symlinks), "v-1", checksum=True, from_copy=True)
    assert not {f.lstrip("-").partition("=")[0] for f in flags} & set(DAEMON_REFUSED)
    assert not {"-L", "-K", "--copy-links", "--keep-dirlinks"} & set(flags)  # nor their short forms


def test_the_daemon_serves_links_as_they_are_and_nothing_the_host_writes():
    script = serve_script(LAYOUT, "ab" * 32, "10.0.0.5", 23456, ["10.0.0.6"], None)
    conf = script[script.index("rsyncd.conf\" <<EOF"):script.index("\nEOF\n")]
    for line in daemon_module_settings():
        assert f"\n{line}\n" in conf + "\n"
    assert conf.index("[dataset]") < conf.index("munge symlinks = no")  # in the module
    assert "refuse options = copy-links copy-dirlinks copy-unsafe-links keep-dirlinks" in conf
    assert f"exclude = {' '.join('/' + n for n in HOST_FILES)}" in conf


@pytest.mark.parametrize("field, value, message", [
    ("symlinks", "follow", "--symlinks must be one of refuse, copy-unsafe, keep, got 'follow'"),
    ("bwlimit_kbps", 0, "--bwlimit must be >= 1 KiB/s, got 0"),
    ("remote_rsync", "rsync;reboot", "bad remote rsync command 'rsync;reboot'"),
    ("remote_rsync", "--rsh=x", "bad remote rsync command '--rsh=x'"),
    ("io_timeout", 0, "rsync I/O timeout must be >= 1 second, got 0"),
])
def test_rsync_options_name_the_bad_value(field, value, message):
    with pytest.raises(ConfigError, match=f"^{message}$".replace("(", r"\(").replace(")", r"\)")):
        RsyncOptions(**{field: value})
