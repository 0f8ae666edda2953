"""The ``Transport`` seam: which transport a host gets (the copying itself is covered end to end
by test_dataset_sync.py's rsync and SFTP runs)."""
import pytest

from elastic.errors import DestRefused
from elastic.sync.rsync import RsyncOptions
from elastic.sync.transport import RsyncTransport, SftpTransport, Transport, choose_transport


@pytest.mark.parametrize("option, has_rsync, chosen", [
    ("auto", True, "rsync"), ("auto", False, "sftp"),
    ("rsync", True, "rsync"), ("sftp", True, "sftp"), ("sftp", False, "sftp"),
])
def test_choose_transport(option, has_rsync, chosen):
    transport: Transport = choose_transport(option, has_rsync, "h", RsyncOptions())
    assert transport.name == chosen
    assert isinstance(transport, RsyncTransport if chosen == "rsync" else SftpTransport)


def test_forced_rsync_on_a_host_without_it_is_refused():
    with pytest.raises(DestRefused, match="h: no /opt/rsync on the host"):
        choose_transport("rsync", False, "h", RsyncOptions("/opt/rsync"))
