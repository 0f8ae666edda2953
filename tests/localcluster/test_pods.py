"""Pod rules: kubectl's age format and the server-side Table rows."""
from datetime import datetime, timedelta, timezone

import pytest

from localcluster import pods

NOW = datetime(2026, 1, 2, 12, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("seconds,expected", [
    (0, "0s"), (59, "59s"), (119, "119s"), (150, "2m30s"), (180, "3m"), (1800, "30m"), (4 * 3600, "4h"),
    (3 * 86400, "3d"),
])
def test_age(seconds, expected):
    assert pods.age(pods.rfc3339(NOW - timedelta(seconds=seconds)), NOW) == expected


def _pod(**status):
    return {"metadata": {"name": "w", "creationTimestamp": pods.rfc3339(NOW)},
            "spec": {"containers": [{"name": "c"}], "nodeName": "local"}, "status": status}


@pytest.mark.parametrize("pod,cells", [
    (_pod(phase="Pending"), ["w", "0/1", "Pending", "0", "0s", "<none>", "local"]),
    (_pod(phase="Running", podIP="127.1.1.1", containerStatuses=[{"ready": True, "restartCount": 0}]),
     ["w", "1/1", "Running", "0", "0s", "127.1.1.1", "local"]),
    ({**_pod(phase="Running"), "metadata": {"name": "w", "creationTimestamp": pods.rfc3339(NOW),
                                            "deletionTimestamp": pods.rfc3339(NOW)}},
     ["w", "0/1", "Terminating", "0", "0s", "<none>", "local"]),
])
def test_table_rows(pod, cells):
    table = pods.table([pod], NOW)
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]][:3] == ["Name", "Ready", "Status"]
    assert table["rows"][0]["cells"][:7] == cells
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


def test_running_status_is_ready_with_ip():
    pod = {"metadata": {"uid": "u"}, "spec": {"containers": [{"name": "c", "image": "i"}]},
           "status": {"phase": "Pending"}}
    status = pods.running_status(pod, "127.1.1.2", "127.0.0.1", NOW, NOW)
    assert status["phase"] == "Running" and status["podIP"] == "127.1.1.2"
    assert pods.is_ready({"status": status})
    assert not pods.is_ready({"status": pods.failed_status(pod, "boom", NOW, 1)})
