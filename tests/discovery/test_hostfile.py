"""The hostfile is replaced atomically: a concurrent reader never sees a partial file."""
from __future__ import annotations

import threading
from pathlib import Path

from discovery.hostfile import HostfileWriter
from discovery.hosts import pods_to_hosts
from shared.atomicfile import write_atomic
from tests.discovery.podspec import pod


def test_reader_never_sees_a_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    versions = ["".join(f"10.0.{v}.{i} slots=1\n" for i in range(200 + v)) for v in range(20)]
    write_atomic(str(path), versions[0])
    valid = set(versions)
    seen: set[str] = set()
    bad: list[str] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            text = path.read_text()
            seen.add(text)
            if text not in valid:
                bad.append(text)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for _ in range(10):
            for v in versions:
                write_atomic(str(path), v)
    finally:
        done.set()
        t.join()
    assert not bad
    assert len(seen) > 1  # the reader really raced the writer
    assert not [p for p in tmp_path.iterdir() if p.name != "hostfile"]  # no temp files left


def test_writer_writes_only_on_change(tmp_path: Path) -> None:
    w = HostfileWriter(str(tmp_path / "hf"))
    hosts = pods_to_hosts([pod("a", annotations={"elastic-horovod/slots": "2"})]).hosts
    assert w.update(hosts) and not w.update(hosts)
    assert (tmp_path / "hf").read_text() == "10.0.0.1 slots=2\n"
    assert w.update(()) and (tmp_path / "hf").read_text() == ""
