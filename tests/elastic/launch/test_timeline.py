"""The timeline elastic-run prints: host-set changes from the daemon, world sizes, resets and
epochs from rank 0's metrics, the wall time and the exit code."""
from elastic.launch import events as driver_events
from elastic.launch.runner import timeline
from tests.metricsrecords import metrics_record as rec

START = 1000.0

# the demo's chaos schedule as the daemon served it: 2 pods, +1, -1, +1
SNAPSHOTS = [
    (1000.5, ("127.0.1.1:1", "127.0.1.2:1")),
    (1001.0, ("127.0.1.1:1", "127.0.1.2:1")),  # unchanged: not an event
    (1010.0, ("127.0.1.1:1", "127.0.1.2:1", "127.0.1.3:1")),
    (1020.0, ("127.0.1.1:1", "127.0.1.3:1")),
    (1030.0, ("127.0.1.1:1", "127.0.1.3:1", "127.0.1.4:1")),
]

RECORDS = [
    rec(event="progress", time=1005.0, epoch=1, world_size=2, resets=0, accuracy=0.3),
    rec(event="progress", time=1012.0, epoch=1, world_size=3, resets=1, accuracy=0.5),
    rec(event="epoch", time=1015.0, epoch=1, world_size=3, resets=1, accuracy=0.6, val_accuracy=0.7),
    rec(event="progress", time=1022.0, epoch=2, world_size=2, resets=2, accuracy=0.8),
    rec(event="progress", time=1032.0, epoch=2, world_size=3, resets=3, accuracy=0.85),
    rec(event="epoch", time=1040.0, epoch=2, world_size=3, resets=3, accuracy=0.9, val_accuracy=0.95),
]


def test_host_changes_name_who_came_and_went():
    events = timeline.host_events(START, SNAPSHOTS)
    assert [e.t for e in events] == [0.5, 10.0, 20.0, 30.0]
    assert events[0].text == "hosts: 2 (2 slots) 127.0.1.1:1 127.0.1.2:1"
    assert events[1].text == "hosts: 3 (3 slots) +127.0.1.3"
    assert events[2].text == "hosts: 2 (2 slots) -127.0.1.2"
    assert events[3].text == "hosts: 3 (3 slots) +127.0.1.4"


def test_world_size_changes_and_resets_come_from_the_metrics():
    events = [e for e in timeline.training_events(START, RECORDS) if e.kind == "world"]
    assert [(e.t, e.text) for e in events] == [
        (5.0, "world size 2 (epoch 1)"),
        (12.0, "world size 3 after reset 1 (epoch 1)"),
        (22.0, "world size 2 after reset 2 (epoch 2)"),
        (32.0, "world size 3 after reset 3 (epoch 2)"),
    ]


def test_summary_adds_it_up_and_the_final_accuracy_is_the_last_validation():
    s = timeline.summarize(START, 1041.25, SNAPSHOTS, RECORDS, 0)
    assert s == timeline.Summary(wall_seconds=41.25, host_changes=3, world_sizes=(2, 3, 2, 3),
                                 resets=3, epochs=2, final_accuracy=0.95, exit_code=0)


def test_timeline_is_sorted_and_ends_with_the_exit():
    events = timeline.build_timeline(START, 1041.25, SNAPSHOTS, RECORDS, 3)
    assert [e.t for e in events] == sorted(e.t for e in events)
    assert events[-1] == timeline.Event(41.25, "exit", "training exited with 3")
    text = timeline.render(events, timeline.summarize(START, 1041.25, SNAPSHOTS, RECORDS, 3))
    assert "+127.0.1.3" in text and "-127.0.1.2" in text
    assert text.splitlines()[-1] == ("summary: wall 41.2s, host set changes 3, world sizes 2 -> 3 -> 2 -> 3, "
                                     "resets 3, epochs 2, final accuracy 0.9500, exit code 3")


def test_without_metrics_or_hosts_the_timeline_still_has_wall_time_and_exit():
    s = timeline.summarize(START, 1002.0, [], [], 1)
    assert (s.wall_seconds, s.host_changes, s.world_sizes, s.final_accuracy, s.exit_code) == (2.0, 0, (), None, 1)
    assert "final accuracy -" in timeline.render(timeline.build_timeline(START, 1002.0, [], [], 1), s)


def test_read_metrics_skips_what_is_not_a_record(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(RECORDS[0].to_json() + '\n[rank 0] noise\n{"event": "progress"}\n' + RECORDS[1].to_json()
                    + '\n{"event": "epoch", "ti')  # a partial last line
    assert timeline.read_metrics(path) == RECORDS[:2]
    assert timeline.read_metrics(tmp_path / "missing") == []
    assert timeline.read_metrics(None) == []


def test_the_empty_list_before_the_first_hosts_is_not_a_host_set_change():
    # a daemon started with a prepare hook serves [] until the first pods are prepared
    snapshots = [(1000.2, ()), (1000.4, ()), *SNAPSHOTS, (1040.0, ())]
    events = timeline.host_events(START, snapshots)
    assert events[0] == timeline.Event(0.5, "hosts", "hosts: 2 (2 slots) 127.0.1.1:1 127.0.1.2:1")
    assert events[-1] == timeline.Event(40.0, "hosts", "hosts: 0 (0 slots) -127.0.1.1 -127.0.1.3 -127.0.1.4")
    assert timeline.summarize(START, 1041.0, snapshots, RECORDS, 0).host_changes == 4
    assert timeline.host_events(START, [(1000.2, ()), (1001.0, ())]) == []


def test_a_daemon_not_synced_or_not_answering_is_not_recorded():
    from elastic.launch.watch import HostRecorder
    from shared.hosts_document import HostsDocument, ServedHost

    def served(*hosts: str) -> HostsDocument:
        return HostsDocument(synced=True, hosts=tuple(ServedHost(h, 1) for h in hosts))

    recorder = HostRecorder()
    for when, answer in enumerate([HostsDocument(synced=False), served("127.0.1.2", "127.0.1.1"),
                                   OSError("unreachable"), served("127.0.1.1", "127.0.1.2"),
                                   HostsDocument(synced=False), served("127.0.1.1")], start=1):
        recorder.see(float(when), answer)
    assert recorder.snapshots() == [(2.0, ("127.0.1.1:1", "127.0.1.2:1")), (6.0, ("127.0.1.1:1",))]


# what the patched Horovod driver wrote for a script that writes no metrics (Horovod's own
# examples): start at 2, a pod joins (3), a worker is killed (2)
DRIVER = [
    driver_events.Record(1001.0, "worker_start", {"host": "127.0.1.1", "slot": 0, "rank": 0}),
    driver_events.Record(1001.0, "reset", {"world_size": 2, "rendezvous": 1, "new_workers": 2}),
    driver_events.Record(1011.0, "reset", {"world_size": 3, "rendezvous": 2, "new_workers": 1}),
    driver_events.Record(1019.5, "abort", {"reason": "127.0.1.2[0] exited with 137", "workers": 2}),
    driver_events.Record(1021.0, "reset", {"world_size": 2, "rendezvous": 3, "new_workers": 0}),
    driver_events.Record(1025.0, "reset", {"world_size": 2, "rendezvous": 4, "new_workers": 0}),
]


def test_world_sizes_and_resets_come_from_the_driver_for_any_script():
    summary = timeline.summarize(START, 1050.0, SNAPSHOTS, [], 0, DRIVER)
    assert summary.world_sizes == (2, 3, 2)
    assert summary.resets == 3  # the first assignment is the start, not a reset
    events = timeline.build_timeline(START, 1050.0, SNAPSHOTS, [], 0, DRIVER)
    worlds = [e.text for e in events if e.kind == "world"]
    assert worlds[0] == "world size 2 (2 new workers)"
    assert worlds[1] == "world size 3 after reset 1 (1 new workers)"
    assert [e.text for e in events if e.kind == "abort"] == ["collectives aborted: 127.0.1.2[0] exited with 137"]
    assert "world sizes 2 -> 3 -> 2, resets 3" in timeline.render(events, summary)


def test_lost_quarantined_and_leaving_workers_are_on_the_timeline():
    """The events of the leave grace, liveness and SIGTERM leaves (patches 0106 and 0108) say
    who was given up, and why."""
    driver = [*DRIVER[:2],
              driver_events.Record(1005.0, "worker_leaving", {"host": "127.0.1.1", "slot": 0}),
              driver_events.Record(1012.0, "worker_lost", {"host": "127.0.1.2", "slot": 0,
                                                           "reason": "silent for 5.0 s"}),
              driver_events.Record(1012.0, "quarantine", {"host": "127.0.1.2", "reason": "silent for 5.0 s"})]
    events = timeline.build_timeline(START, 1050.0, SNAPSHOTS, [], 0, driver)
    assert [e.text for e in events if e.kind == "leave"] == ["127.0.1.1[0] is leaving"]
    assert [e.text for e in events if e.kind == "lost"] == ["127.0.1.2[0] lost: silent for 5.0 s",
                                                           "127.0.1.2 quarantined: silent for 5.0 s"]


def test_driver_events_win_over_the_metrics_and_epochs_stay():
    summary = timeline.summarize(START, 1050.0, SNAPSHOTS, RECORDS, 0, DRIVER)
    assert summary.world_sizes == (2, 3, 2) and summary.epochs == 2
    kinds = [e.kind for e in timeline.build_timeline(START, 1050.0, SNAPSHOTS, RECORDS, 0, DRIVER)]
    assert kinds.count("world") == 4 and kinds.count("epoch") == 2


def test_driver_records_parse_and_follow_a_growing_file(tmp_path):
    path = tmp_path / "events.jsonl"
    follower = driver_events.Follower(path)
    assert follower.poll() == []  # no file yet
    path.write_text('{"time": 1.5, "kind": "reset", "detail": {"world_size": 2}}\n{"time": 2, "ki')
    assert follower.poll() == [driver_events.Record(1.5, "reset", {"world_size": 2})]
    with open(path, "a") as f:
        f.write('nd": "progress", "detail": {"commits": 3}}\nnot json\n[1, 2]\n{"kind": "x"}\n')
    assert follower.poll() == [driver_events.Record(2.0, "progress", {"commits": 3})]
    assert len(driver_events.read_records(path)) == 2
