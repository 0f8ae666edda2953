"""End to end, what scripts/demo does with a shorter schedule: a local cluster of two pods,
a generated MNIST-format dataset, elastic-run (its own discovery daemon, dataset-sync,
horovodrun with push discovery) and the real elastic MNIST training while a pod is added
during start-up (as soon as the driver has started the first workers, while they import
torch) and one pod is hard-killed mid-epoch (deleted with grace 0). The job finishes, the
world size changes show in its timeline, the pod that joined got the dataset before it
trained, and the kill was handled by aborting the peers' collectives. What the launcher
printed reads like a run: no raw JSON metrics lines, no Horovod abort error."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from elastic.launch import console
from localcluster.testing import running_cluster
from shared.event_kinds import Kind
from shared.metrics_record import MetricsRecord, read_records

BIN = Path(sys.executable).parent


def env() -> dict:
    e = dict(os.environ)
    e["PATH"] = f"{BIN}:{e.get('PATH', '')}"
    e["PYTHONUNBUFFERED"] = "1"
    for name in ("DISCOVERY_URL", "DISCOVERY_SELECTOR", "DISCOVERY_PORT", "ELASTIC_DATASET"):
        e.pop(name, None)
    return e


def first_served(timeline: dict, ip: str) -> float:
    """Unix time of the first host snapshot in the timeline that lists ``ip``."""
    return min(t for t, hosts in timeline["hosts"] if any(h.rpartition(":")[0] == ip for h in hosts))


@pytest.mark.timeout(600)
def test_elastic_mnist_uses_a_pod_added_during_start_up_and_survives_a_hard_kill(tmp_path):
    data = tmp_path / "mnist"
    gen = subprocess.run([sys.executable, "-m", "training.datagen", str(data), "--train", "1200", "--test", "200"],
                         capture_output=True, text=True, timeout=120)
    assert gen.returncode == 0, gen.stderr
    metrics = tmp_path / "metrics.jsonl"
    metrics.touch()
    timeline_file = tmp_path / "timeline.json"
    events = tmp_path / "driver-events.jsonl"
    chaos_log = tmp_path / "chaos.log"
    hold = tmp_path / "hold"  # the training steps slowly while the chaos schedule runs
    with running_cluster(tmp_path / "cluster", workers=2) as c, open(chaos_log, "w") as chaos_out:
        chaos = subprocess.Popen(
            [sys.executable, "-m", "localcluster.chaos", "--state-dir", str(c.state_dir),
             "--metrics-file", str(metrics), "--events-file", str(events), "--steps", "add,kill",
             "--delete-pod", "worker-1",
             "--hold-file", str(hold), "--timeout", "400"],
            stdout=subprocess.DEVNULL, stderr=chaos_out, env=env())
        try:
            run = subprocess.run(
                [str(BIN / "elastic-run"), "--selector", "app=elastic-horovod,role=worker",
                 "--kubeconfig", str(c.kubeconfig), "--ssh-port", str(c.ssh_port),
                 "--ssh-identity-file", str(c.identity), "--network-interface", "lo",
                 "--min-np", "2", "--max-np", "3", "--elastic-timeout", "120",
                 "--blacklist-cooldown-range", "5", "30",
                 "--dataset", f"{data}:/data/mnist", "--metrics-file", str(metrics),
                 "--timeline-file", str(timeline_file), "--events-file", str(events),
                 "-x", "OMP_NUM_THREADS=1", "--",
                 "python", "-m", "training.mnist", "--data-dir", "/data/mnist", "--epochs", "2",
                 "--batch-size", "16", "--lr", "0.05", "--commit-every", "3", "--log-every", "3",
                 "--debug-step-delay", "0.5", "--debug-hold-file", str(hold),
                 "--metrics-file", str(metrics)],
                capture_output=True, text=True, timeout=480, env=env())
            try:
                chaos.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        finally:
            if chaos.poll() is None:
                chaos.kill()
                chaos.wait()
        chaos_err = chaos_log.read_text()
        report = f"elastic-run ({run.returncode}):\n{run.stderr[-4000:]}\nchaos ({chaos.returncode}):\n{chaos_err}"
        assert run.returncode == 0, report
        assert chaos.returncode == 0, report

        # the pod added mid-run got the dataset, byte for byte, before it trained
        joined = c.pod_data_dir("worker-2") / "mnist"
        for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
            assert (joined / name).read_bytes() == (data / name).read_bytes()
        committed, joined_ip = os.lstat(joined).st_mtime, c.pod_ip("worker-2")  # dataset-sync's final rename

    doc = json.loads(timeline_file.read_text())
    assert committed <= first_served(doc, joined_ip), "worker-2 was served (could train) before its data was there"
    summary = doc["summary"]
    assert summary["exit_code"] == 0
    assert summary["epochs"] == 2
    assert summary["final_accuracy"] is not None
    # 2 pods, one added while the job started (3), one killed (2): the training saw every change
    assert summary["world_sizes"][:3] == [2, 3, 2], summary
    assert summary["resets"] >= 2
    assert summary["host_changes"] >= 2
    kinds = [e["kind"] for e in doc["events"]]
    assert kinds[-1] == "exit"
    assert "timeline:" in run.stderr and "world sizes 2 -> 3 -> 2" in run.stderr
    # what the user reads: no rank's raw JSON metrics line and no Horovod
    # "uncaught exception: aborted" error for the handled kill; plain progress lines (stdout is
    # not a terminal here) and the world size changes instead. The raw records are in the
    # metrics file.
    shown = run.stdout + run.stderr
    (tmp_path / "elastic-run.out").write_text(shown)
    assert '"event": "progress"' not in shown and '"event": "epoch"' not in shown, shown[-4000:]
    assert "uncaught exception: aborted" not in shown, shown[-4000:]
    plain = [line for line in run.stdout.splitlines() if "samples/s" in line]
    worlds = [line.split(" | ")[0] for line in plain]
    # a line at each change the training reported: the world of 3 may be aborted before it logs
    # a step (the chaos's kill follows the driver's reset to 3), and then the timeline alone
    # names it (asserted above)
    def changes(sizes):
        return [s for i, s in enumerate(sizes) if i == 0 or s != sizes[i - 1]]

    progress_sizes = [r.world_size for r in read_records(metrics) if r.event == "progress"]
    assert changes(worlds) == [f"world {s}" for s in changes(progress_sizes)], shown[-4000:]
    assert worlds[0] == "world 2" and worlds[-1] == "world 2", shown[-4000:]
    assert "Horovod background loop uncaught exception" not in shown, shown[-4000:]
    # heard from the driver's abort ("... is gone") or first from the dead peer's socket
    assert re.search(rf"^elastic-run: rank \d+: {re.escape(console.EXPECTED_ABORT_TEXT)} "
                     rf"\((.*is gone|{re.escape(console.BROKEN_REASON)}.*)\)$",
                     run.stderr, re.M), shown[-4000:]
    raw = [MetricsRecord.from_json(line) for line in metrics.read_text().splitlines()]  # each line a record
    assert {"progress", "epoch"} <= {r.event for r in raw}
    # the driver's own record: it started at 2 (the pod came while the workers started, see
    # the chaos schedule's --events-file) and the kill aborted the peers' collectives
    driver = doc["driver_events"]
    resets = [e["detail"]["world_size"] for e in driver if e["kind"] == Kind.RESET]
    assert resets[0] == 2 and 3 in resets, resets
    assert any(e["kind"] == Kind.ABORT for e in driver), driver
