"""Pure parts of dataset-sync: safety rules, manifest, listings, rsync output, retries, plans."""
from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from elastic.errors import ConfigError, SyncError
from elastic.sync.manifest import (
    MANIFEST_NAME,
    TRAINING_SCAN_NAME,
    BadManifest,
    Manifest,
    UnsafeSymlink,
    build_manifest,
    compare,
    listing_digest,
    parse_listing,
)
from elastic.sync.progress import HostProgress, render_plain_lines, render_status_line
from elastic.sync.remote import DestRefused, Layout, listing_script, parse_probe
from elastic.sync.retry import RetryPolicy, retry_call
from elastic.sync.rsync import RsyncOptions, parse_progress, parse_stats, rsync_argv
from elastic.sync.safety import UnsafePath, check_dest, check_source, parse_allowed_roots
from elastic.sync.sftp import plan_changes

REFUSED_DESTS = [
    ("/", ("/data",), "refusing DEST '/'"),
    ("/etc/passwd", ("/data",), "outside the allowed roots"),
    ("/data", ("/data",), "allowed root itself"),
    ("/data/../etc", ("/data",), "'..'"),
    ("/data/./x", ("/data",), "'.'"),
    ("data/x", ("/data",), "absolute"),
    ("/data/x y", ("/data",), "' '"),
    ("/data/$(reboot)", ("/data",), "'\\$'"),
    ("/data/a;b", ("/data",), "';'"),
    ("/data/-rf", ("/data",), "looks like an option"),
    ("-e", ("/data",), "looks like an option"),
    ("/datax/y", ("/data",), "outside the allowed roots"),
    ("//", ("/data",), "'/'"),
]


@pytest.mark.parametrize("dest,roots,message", REFUSED_DESTS)
def test_dest_refusals(dest, roots, message):
    with pytest.raises(UnsafePath, match=message):
        check_dest(dest, roots)


def test_dest_accepted_inside_roots():
    assert check_dest("/data/mnist/") == "/data/mnist"
    assert check_dest("/scratch/a/b", ("/data", "/scratch/")) == "/scratch/a/b"
    assert parse_allowed_roots("/data:/scratch") == ("/data", "/scratch")
    with pytest.raises(UnsafePath, match="allowed root 'relative' must be an absolute path"):
        parse_allowed_roots("relative")


def test_source_must_be_an_existing_directory(tmp_path):
    with pytest.raises(ConfigError, match="missing dataset directory"):
        check_source(str(tmp_path / "nope"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        check_source(str(tmp_path / "f"))


def _tree(root):
    (root / "a" / "b").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "a" / "one").write_bytes(b"1" * 10)
    (root / "a" / "b" / "two").write_bytes(b"")
    (root / "top").write_bytes(b"top")
    (root / "a" / "rel").symlink_to("b/two")
    (root / "dangling").symlink_to("a/none")
    return root


def test_manifest_lists_files_links_and_dirs(tmp_path):
    src = _tree(tmp_path / "src")
    (src / MANIFEST_NAME).write_text("old manifest of a synced copy")
    m = build_manifest(str(src))
    assert sorted(m.files) == ["a/b/two", "a/one", "top"]
    assert m.files["a/one"].size == 10 and m.files["a/one"].sha256 == hashlib.sha256(b"1" * 10).hexdigest()
    assert m.links == {"a/rel": "b/two", "dangling": "a/none"}
    assert m.dirs == ("a", "a/b", "empty")
    assert m.total_bytes == 13
    assert Manifest.from_json(m.to_json()) == m
    (src / "top").write_bytes(b"changed")
    assert build_manifest(str(src)).digest != m.digest


@pytest.mark.parametrize("target", ["/etc/passwd", "../outside", "a/../../x", "loop/../.."])
def test_manifest_refuses_symlinks_leaving_src(tmp_path, target):
    src = _tree(tmp_path / "src")
    (src / "loop").symlink_to("a")
    (src / "escape").symlink_to(target)
    with pytest.raises(UnsafeSymlink, match="points outside SRC"):
        build_manifest(str(src))


def test_manifest_refuses_special_files(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    os.mkfifo(src / "fifo")
    with pytest.raises(ConfigError, match="not a regular file"):
        build_manifest(str(src))


def test_manifest_file_that_was_tampered_with_is_refused(tmp_path):
    m = build_manifest(str(_tree(tmp_path / "src")))
    with pytest.raises(BadManifest, match="digest"):
        Manifest.from_json(m.to_json().replace('"size": 10', '"size": 11'))
    with pytest.raises(BadManifest, match="not a dataset manifest: format is None"):
        Manifest.from_json("{}")


def test_listing_script_output_matches_the_manifest(tmp_path):
    """The listing the hosts run (find/sha256sum/sort) hashes to the manifest's digest."""
    src = _tree(tmp_path / "src")
    (src / "name with\nnewline").write_bytes(b"odd")
    m = build_manifest(str(src))
    out = subprocess.run(["sh", "-c", listing_script(str(src))], capture_output=True, check=True).stdout
    assert compare(m, parse_listing(out)) == []
    assert hashlib.sha256(out).hexdigest() == listing_digest(m)
    (src / "a" / "one").write_bytes(b"corrupt")
    (src / "extra").write_bytes(b"")
    (src / "a" / "b" / "two").unlink()
    out = subprocess.run(["sh", "-c", listing_script(str(src))], capture_output=True, check=True).stdout
    assert compare(m, parse_listing(out)) == ["checksum mismatch a/one", "missing file a/b/two",
                                              "unexpected file extra"]
    assert hashlib.sha256(out).hexdigest() != listing_digest(m)
    with pytest.raises(BadManifest, match="unexpected record in host listing: 'X what'"):
        parse_listing(b"X what\0")


def test_a_training_scan_cache_in_a_copy_is_not_part_of_the_dataset(tmp_path):
    """The training jobs write their image-folder scan cache at the top of the data on first
    use (training/imagefolder.py): dataset-sync must neither copy it, nor count it, nor take a
    copy holding one for a changed copy (which would resync it on every run)."""
    from training.imagefolder import CACHE_NAME

    assert TRAINING_SCAN_NAME == CACHE_NAME
    src = _tree(tmp_path / "src")
    m = build_manifest(str(src))
    (src / CACHE_NAME).write_text("{}")
    assert build_manifest(str(src)) == m
    out = subprocess.run(["sh", "-c", listing_script(str(src))], capture_output=True, check=True).stdout
    assert compare(m, parse_listing(out)) == [] and hashlib.sha256(out).hexdigest() == listing_digest(m)
    assert f"--exclude=/{CACHE_NAME}" in rsync_argv("/s", "h", Layout("/data/x"), "", "ssh", RsyncOptions())
    (src / "a" / CACHE_NAME).write_text("{}")  # only at the top: elsewhere it is data
    assert compare(m, parse_listing(subprocess.run(["sh", "-c", listing_script(str(src))],
                                                   capture_output=True, check=True).stdout)) == [
        f"unexpected file a/{CACHE_NAME}"]


def test_probe_answers():
    assert parse_probe("current=v-1\nrsync=yes\nstaging=partial\nok=1\n").current == "v-1"
    probe = parse_probe("current=\nrsync=no\nstaging=empty\nok=1\n")
    assert (probe.current, probe.has_rsync, probe.staging_partial) == ("", False, False)
    with pytest.raises(DestRefused, match="not managed"):
        parse_probe("error=/data/x exists and is not managed by dataset-sync\n")
    with pytest.raises(SyncError, match="unexpected answer"):
        parse_probe("bash: sh: not found\n")


def test_layout_and_rsync_command():
    layout = Layout("/data/mnist")
    assert (layout.state, layout.staging) == ("/data/.mnist.dataset-sync", "/data/.mnist.dataset-sync/staging")
    argv = rsync_argv("/src/", "10.0.0.1", layout, "v-1", "ssh -F cfg", RsyncOptions(bwlimit_kbps=100))
    assert argv[-3:] == ["--", "/src/", "10.0.0.1:/data/.mnist.dataset-sync/staging/"]
    assert "--link-dest=../v-1" in argv and "--delete" in argv and "--bwlimit=100" in argv
    assert f"--exclude=/{MANIFEST_NAME}" in argv and "--safe-links" in argv
    assert not any(a.startswith("--link-dest") for a in rsync_argv("/s", "h", layout, "", "ssh", RsyncOptions()))


def test_rsync_progress_and_stats_parsing():
    assert parse_progress("      3,020,000  75%  356.11MB/s    0:00:00 (xfr#2, to-chk=49/53)").bytes == 3020000
    p = parse_progress("3020000  75%  356.11MB/s    0:00:00 (xfr#2, to-chk=49/53)")
    assert (p.files_sent, p.checked, p.total) == (2, 4, 53)
    assert parse_progress("          32768   0%    0.00kB/s    0:00:00  ").files_sent is None
    assert parse_progress("sending incremental file list") is None
    stats = parse_stats("Number of files: 53\nNumber of regular files transferred: 3\n"
                        "Total transferred file size: 1,234 bytes\nLiteral data: 1000 bytes\nTotal bytes sent: 2000\n")
    assert (stats.files_transferred, stats.bytes_transferred, stats.literal_bytes,
            stats.bytes_sent) == (3, 1234, 1000, 2000)
    with pytest.raises(SyncError, match=r"rsync printed no statistics \(files missing\)"):
        parse_stats("nothing")


def test_retry_policy_backoff_and_classification():
    assert RetryPolicy(attempts=4, base=1, cap=3).delays() == [1, 2, 3]
    with pytest.raises(ValueError, match="attempts must be >= 1, got 0"):
        RetryPolicy(attempts=0)
    calls, waits = [], []

    def flaky(attempt):
        calls.append(attempt)
        if attempt < 3:
            raise SyncError("transient")
        return "done"

    assert retry_call(flaky, RetryPolicy(3, 0.5), lambda e: True, lambda d: waits.append(d) and False) == ("done", 3)
    assert waits == [0.5, 1.0]
    with pytest.raises(SyncError, match="transient"):  # not retryable: one call only
        retry_call(flaky, RetryPolicy(3), lambda e: False, lambda d: False)
    calls.clear()
    with pytest.raises(SyncError, match="transient"):  # the wait says stop (cancelled): no further attempt
        retry_call(flaky, RetryPolicy(5), lambda e: True, lambda d: True)
    assert calls == [1]


def test_sftp_plan_turns_staging_into_the_manifest(tmp_path):
    src = _tree(tmp_path / "src")
    m = build_manifest(str(src))
    listing = parse_listing(b"D a\0D old\0D old/deep\0F " + m.files["a/one"].sha256.encode() + b"  a/one\0"
                            b"F " + b"0" * 64 + b"  top\0F " + b"1" * 64 + b"  old/deep/x\0L a/rel\x01elsewhere\0")
    plan = plan_changes(m, listing)
    assert plan.remove_files == ("a/rel", "old/deep/x")
    assert plan.remove_dirs == ("old/deep", "old")
    assert plan.make_dirs == ("empty", "a/b")
    assert plan.make_links == (("a/rel", "b/two"), ("dangling", "a/none"))
    assert plan.upload == ("a/b/two", "top")


def test_progress_rendering():
    snap = {"h1": HostProgress("copying", 2048, 3, 10, 20), "h2": HostProgress("done", 0, 0, 20, 20)}
    line = render_status_line(snap)
    assert line.startswith("total: 1/2 hosts done, 0 failed, 3 files 2.0 KiB sent")
    assert "h1 copying files 10/20" in line and "h2" not in line
    assert len(render_status_line(snap, width=30)) == 30
    lines = render_plain_lines(snap, {"h2": snap["h2"]})
    assert lines[0].startswith("progress: h1 copying") and lines[-1].startswith("progress: total:")
    assert render_plain_lines(snap, snap) == []


def test_host_scripts_publish_a_verified_version_by_renaming(tmp_path):
    """The probe/verify/commit scripts, run by a local shell on a local 'host' directory."""
    from elastic.sync.manifest import listing_digest, quick_digest
    from elastic.sync.remote import probe_script, verify_commit_script

    src = _tree(tmp_path / "src")
    m = build_manifest(str(src))
    layout = Layout(str(tmp_path / "data" / "ds"))
    sh = lambda script, stdin=b"": subprocess.run(["sh", "-c", script], input=stdin, capture_output=True,  # noqa: E731
                                                  check=True).stdout.decode()
    probe = parse_probe(sh(probe_script(layout, "rsync")))
    assert (probe.current, probe.has_rsync, probe.staging_partial) == ("", True, False)
    subprocess.run(["cp", "-a", f"{src}/.", layout.staging], check=True)
    (tmp_path / "data" / "ds.partial").write_text("")  # unrelated names are not touched
    out = sh(verify_commit_script(layout, listing_digest(m), "v-1", ""), m.to_json().encode())
    assert "verify=ok" in out and "committed=v-1" in out
    dest = tmp_path / "data" / "ds"
    assert os.readlink(dest) == ".ds.dataset-sync/v-1" and (dest / "a" / "one").read_bytes() == b"1" * 10
    assert Manifest.from_json((dest / MANIFEST_NAME).read_text()) == m
    probe = parse_probe(sh(probe_script(layout, "/no/rsync")))
    assert (probe.current, probe.current_digest, probe.has_rsync, probe.unchanged) == ("v-1", m.digest, False, False)

    # The probe recognises an unchanged copy: quick (sizes, mtimes) or by checksum.
    assert parse_probe(sh(probe_script(layout, "rsync", m.digest, "quick", quick_digest(m)))).unchanged
    assert parse_probe(sh(probe_script(layout, "rsync", m.digest, "checksum", listing_digest(m)))).unchanged
    (dest / "top").write_bytes(b"TOP")  # same size and (second-resolution) mtime, different bytes
    os.utime(dest / "top", ns=(m.files["top"].mtime_ns, m.files["top"].mtime_ns))
    assert parse_probe(sh(probe_script(layout, "rsync", m.digest, "quick", quick_digest(m)))).unchanged
    assert not parse_probe(sh(probe_script(layout, "rsync", m.digest, "checksum", listing_digest(m)))).unchanged
    (dest / "top").write_bytes(b"top, longer")
    assert not parse_probe(sh(probe_script(layout, "rsync", m.digest, "quick", quick_digest(m)))).unchanged
    (dest / "top").write_bytes(b"top")

    # A staging copy that differs is not published; DEST keeps v-1.
    subprocess.run(["cp", "-a", f"{src}/.", layout.staging], check=True)
    (Path(layout.staging) / "top").write_bytes(b"tampered")
    out = sh(verify_commit_script(layout, listing_digest(m), "v-2", "v-1"), m.to_json().encode())
    assert out.strip() == "verify=mismatch" and os.readlink(dest) == ".ds.dataset-sync/v-1"
    (Path(layout.staging) / "top").write_bytes(b"top")
    assert "committed=v-2" in sh(verify_commit_script(layout, listing_digest(m), "v-2", "v-1"), m.to_json().encode())
    subprocess.run(["cp", "-a", f"{src}/.", layout.staging], check=True)
    sh(verify_commit_script(layout, listing_digest(m), "v-3", "v-2"), m.to_json().encode())
    assert sorted(os.listdir(layout.state)) == ["v-2", "v-3"]  # previous kept, older removed
    assert sorted(os.listdir(tmp_path / "data")) == [".ds.dataset-sync", "ds", "ds.partial"]

    # Something at DEST that dataset-sync did not make is refused.
    other = Layout(str(tmp_path / "data" / "ds.partial"))
    with pytest.raises(DestRefused, match="not managed by dataset-sync"):
        parse_probe(sh(probe_script(other, "rsync")))


def test_hash_cache_skips_unchanged_files_but_notices_any_write(tmp_path):
    from elastic.sync.manifest import cache_path, load_cache, save_cache

    src = _tree(tmp_path / "src")
    cache: dict = {}
    first = build_manifest(str(src), cache)
    assert set(cache) == set(first.files)
    # A stale checksum planted in the cache is believed only while the file's stat is the same...
    fake = dict(cache)
    fake["top"] = (*cache["top"][:4], "f" * 64)
    assert build_manifest(str(src), fake).files["top"].sha256 == "f" * 64
    # ...a rewrite with the same size and the old mtime still changes ctime: hashed again.
    st = (src / "top").stat()
    (src / "top").write_bytes(b"TOP")
    os.utime(src / "top", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert build_manifest(str(src), fake).files["top"].sha256 == hashlib.sha256(b"TOP").hexdigest()
    path = cache_path(str(src), str(tmp_path / "cache"))
    save_cache(path, str(src), cache)
    assert load_cache(path, str(src)) == cache and load_cache(path, "/other/src") == {}
    Path(path).write_text("not json")
    assert load_cache(path, str(src)) == {}


def test_the_lock_script_lets_one_holder_in_and_tells_a_waiter_when_it_gives_up(tmp_path):
    from elastic.sync.lock import lock_script

    layout = Layout(str(tmp_path / "data" / "ds"))
    (tmp_path / "data").mkdir()
    holder = subprocess.Popen(["sh", "-c", lock_script(layout, 5)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline() == "lock=held\n"
        waiter = subprocess.run(["sh", "-c", lock_script(layout, 0.3)], input="", capture_output=True, text=True,
                                timeout=30)
        assert waiter.stdout == "lock=waiting\nlock=timeout\n"
    finally:
        holder.stdin.close()  # end of stdin releases the lock
        holder.wait(timeout=30)
        holder.stdout.close()
    after = subprocess.run(["sh", "-c", lock_script(layout, 0.3)], input="", capture_output=True, text=True,
                           timeout=30)
    assert after.stdout == "lock=held\n"

    (tmp_path / "data" / ".other.dataset-sync").symlink_to(tmp_path)
    refused = subprocess.run(["sh", "-c", lock_script(Layout(str(tmp_path / "data" / "other")), 0.3)], input="",
                             capture_output=True, text=True, timeout=30)
    assert refused.stdout.startswith("error=") and "is not a directory" in refused.stdout
