"""The non-root fallback (``isolation="none"``): pods are sshd hosts with their own address but
without namespaces; deleting one still stops everything it started, even detached processes."""
import socket

from localcluster.testing import running_cluster
from tests.waiting import wait_for


def test_pods_without_namespaces(tmp_path):
    with running_cluster(tmp_path / "c", isolation="none") as lc:
        lc.create_pod("plain")
        ip = lc.wait_ready("plain")
        out = lc.ssh("plain", "hostname; nohup sleep 1000 >/dev/null 2>&1 & echo $!")
        assert out.returncode == 0, out.stderr
        host, pid = out.stdout.split()
        assert host == socket.gethostname()  # no UTS namespace: the machine's hostname
        pid = int(pid)  # no pid namespace: the host's pid
        assert _alive(pid)
        assert ip.startswith("127.")
        lc.delete_pod("plain", grace_seconds=5)
        lc.wait_gone("plain")
        wait_for(lambda: not _alive(pid), 5, "the process the pod started to die with it")


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False
