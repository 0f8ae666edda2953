"""The plot of a run (elastic.launch.plot): its series and markers from the timeline's inputs,
and the file it writes, read back (SVG element ids, PNG size, the description both carry)."""
import subprocess
import sys
from pathlib import Path

import pytest

from elastic.errors import ConfigError
from elastic.launch import plot
from elastic.launch.timeline import Event
from tests.elastic.launch.plothelp import png_size, svg_ids
from tests.metricsrecords import metrics_record

START = 1_000.0
SNAPSHOTS = [
    (START + 0.5, ()),                                           # nothing served yet: no event
    (START + 1, ("10.0.0.1:1", "10.0.0.2:1")),                   # the first two hosts
    (START + 20, ("10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1")),    # one joins
    (START + 40, ("10.0.0.1:1", "10.0.0.3:1")),                  # one leaves
]
RECORDS = [
    metrics_record(event="progress", time=START + 5 + 3 * i, epoch=1, world_size=2 if i < 5 else 3,
                   samples_per_sec=100.0 + i, loss=2.0 / (i + 1), resets=0 if i < 5 else 1)
    for i in range(12)
] + [metrics_record(event="epoch", time=START + 42, epoch=1, world_size=3, samples_per_sec=50.0,
                    loss=0.1, resets=1, val_accuracy=0.9)]


def test_series_and_markers_from_host_snapshots_and_metrics():
    data = plot.plot_data(START, START + 50, SNAPSHOTS, RECORDS)
    assert data.series["slots_served"] == ((1.0, 2), (20.0, 3), (40.0, 2))
    assert data.series["world_size"] == ((5.0, 2), (20.0, 3))
    # rates and losses from the periodic records; the epoch record's average is another quantity
    assert len(data.series["samples_per_sec"]) == 12 and data.series["samples_per_sec"][0] == (5.0, 100.0)
    assert len(data.series["loss"]) == 12
    assert data.markers["join"] == ((1.0, "+10.0.0.1"), (1.0, "+10.0.0.2"), (20.0, "+10.0.0.3"))
    assert data.markers["leave"] == ((40.0, "-10.0.0.2"),)
    assert data.markers["reset"] == ((20.0, "reset 1"),)
    assert data.markers["epoch"] == ((42.0, "epoch 1"),)


def test_driver_events_give_world_sizes_and_resets_for_any_training_script():
    """No metrics at all (any training script): world sizes and resets come from the driver's
    events file (its JSON records), the first reset being the start."""
    events = [{"time": START + 3, "kind": "reset", "detail": {"world_size": 2, "rendezvous": 1}},
              {"time": START + 4, "kind": "worker_start", "detail": {"host": "10.0.0.1", "slot": 0}},
              {"time": START + 21, "kind": "reset", "detail": {"world_size": 3, "rendezvous": 2}},
              {"time": START + 30, "kind": "abort", "detail": {"reason": "worker 10.0.0.2 gone"}},
              {"time": START + 31, "kind": "reset", "detail": {"world_size": 2, "rendezvous": 3}},
              ("garbage",)]
    data = plot.plot_data(START, START + 50, SNAPSHOTS, [], events)
    assert data.series["world_size"] == ((3.0, 2), (21.0, 3), (31.0, 2))
    assert data.markers["reset"] == ((21.0, "reset 1"), (31.0, "reset 2"))
    assert data.markers["event"] == ((30.0, "abort: worker 10.0.0.2 gone"),)  # worker_start is not drawn
    assert data.series["samples_per_sec"] == () and data.series["loss"] == ()
    # the driver's world sizes and resets win over the metrics' when both exist
    both = plot.plot_data(START, START + 50, SNAPSHOTS, RECORDS, events)
    assert both.series["world_size"] == ((3.0, 2), (21.0, 3), (31.0, 2))
    assert both.markers["reset"] == ((21.0, "reset 1"), (31.0, "reset 2"))


def test_other_event_shapes_are_understood():
    events = [(START + 3, "world", "world size 2"), Event(22.0, "world", "world size 3 after reset 1"),
              (START + 25, "reset", {"world_size": 3})]
    data = plot.plot_data(START, START + 50, SNAPSHOTS, [], events)
    assert data.series["world_size"] == ((3.0, 2), (22.0, 3))
    assert data.markers["reset"] == ()  # one reset record: the start


def test_svg_has_an_element_per_series_and_marker_and_carries_its_description(tmp_path):
    data = plot.plot_data(START, START + 50, SNAPSHOTS, RECORDS)
    path = plot.write_plot(tmp_path / "run.svg", data)
    ids = svg_ids(path)
    for name in ("series-world-size", "series-slots-served", "series-samples-per-sec", "series-loss",
                 "marker-join-0", "marker-join-2", "marker-leave-0", "marker-reset-0", "marker-epoch-0"):
        assert name in ids, name
    assert "marker-join-3" not in ids and "marker-leave-1" not in ids
    described = plot.read_description(path)
    assert described["series"] == {"world_size": 2, "slots_served": 3, "samples_per_sec": 12, "loss": 12}
    assert described["markers"] == {"join": 3, "leave": 1, "reset": 1, "epoch": 1, "event": 0}
    assert not list(tmp_path.glob(".*tmp")), "the temporary file was left behind"


def test_png_has_its_size_and_description_and_no_metrics_means_no_metric_series(tmp_path):
    data = plot.plot_data(START, START + 50, SNAPSHOTS, [])
    path = plot.write_plot(tmp_path / "run.png", data)
    assert png_size(path) == (1000, 750)
    described = plot.read_description(path)
    assert described["series"] == {"world_size": 0, "slots_served": 3, "samples_per_sec": 0, "loss": 0}
    assert described["markers"]["join"] == 3 and described["markers"]["leave"] == 1
    svg = plot.write_plot(tmp_path / "run.svg", data)
    ids = svg_ids(svg)
    assert "series-slots-served" in ids and "series-loss" not in ids and "series-world-size" not in ids


@pytest.mark.parametrize("name, message", [
    ("run.pdf", "the file name must end in .png or .svg"),
    ("missing/run.png", "no such directory"),
])
def test_bad_plot_paths_are_refused(tmp_path, name, message):
    with pytest.raises(ConfigError, match=message):
        plot.check_plot_path(str(tmp_path / name))


def test_elastic_run_refuses_a_bad_plot_path_in_one_line_with_exit_2(tmp_path):
    elastic_run = Path(sys.executable).parent / "elastic-run"
    proc = subprocess.run([str(elastic_run), "--discovery-url", "http://127.0.0.1:9", "--plot",
                           str(tmp_path / "run.jpg"), "--", "true"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: --plot {tmp_path / 'run.jpg'}: the file name must end in .png or .svg"


def test_a_plot_that_cannot_be_written_raises_plot_error(tmp_path):
    data = plot.plot_data(START, START + 50, SNAPSHOTS, RECORDS)
    (tmp_path / "gone").mkdir()
    target = tmp_path / "gone" / "run.png"
    (tmp_path / "gone").rmdir()
    with pytest.raises(plot.PlotError, match="cannot write the plot"):
        plot.write_plot(target, data)
