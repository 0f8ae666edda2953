"""A picture of an elastic run: world size, samples/s and loss over time, with host joins,
leaves, resets and epochs marked (``elastic-run --plot FILE``).

Two steps, the first pure:

- ``plot_data(start, end, snapshots, records, events)`` -> ``PlotData``: the series and
  markers, from the same inputs as ``elastic.launch.timeline``:

  * ``snapshots``: the daemon's host sets ``[(unix_time, ("host:slots", ...)), ...]`` -- the
    slots served over time, and a join/leave marker per host that came or went;
  * ``records``: the training's metrics (``shared.metrics_record.MetricsRecord``s),
    optional: any training script works without them;
  * ``events``: the Horovod driver's events, whatever the training, as written to its events
    file (``{"time": unix, "kind": ..., "detail": {...}}``, see ``elastic.launch.timeline``),
    as objects with ``time``/``kind``/``detail`` attributes, ``(unix_time, kind, detail)``
    tuples, or ``timeline.Event``s (``t`` seconds since ``start``, ``text``). A ``reset``
    (new assignments in effect; ``detail["world_size"]``) is a world-size point and, after
    the first (the start), a reset marker; another kind containing ``world`` with a number
    in its detail is a world-size point; another kind containing ``reset`` a reset marker;
    ``abort``/``stop``/``note`` an ``event`` marker; the rest (per-worker events) is not
    drawn. World sizes and resets from the driver win over the metrics' (they exist for any
    script).

- ``write_plot(path, data)`` draws it with matplotlib (Agg backend, no display needed) as PNG
  or SVG by the extension, writes a temporary file and renames it into place. Each series and
  marker is an artist with a ``gid`` (``series-world-size``, ``marker-join-0``...), which SVG
  keeps as element ids; both formats carry ``data.describe()`` as JSON in their
  ``Description`` metadata, which ``read_description(path)`` reads back (stdlib only), so a
  test or a script can check what a plot shows without looking at it.

``check_plot_path(path)`` is the CLI's early check (``ConfigError``: unknown extension,
missing directory). ``write_plot`` raises ``PlotError`` (an ``ElasticError``) when the file
cannot be written.
"""
from __future__ import annotations

import json
import os
import re
import struct
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic.errors import ConfigError, PlotError
from shared.event_kinds import Kind
from shared.metrics_record import MetricsRecord

FORMATS = (".png", ".svg")
SERIES = ("world_size", "slots_served", "samples_per_sec", "loss")
MARKERS = ("join", "leave", "reset", "epoch", "event")
# driver event kinds drawn as ``event`` markers; the others (worker_start, progress, notify...)
# come by the dozen and would hide the plot
MARKED_KINDS = ("abort", "stop", "note")
MAX_LABEL = 32  # characters of a marker's label drawn beside its line
_NUMBER = re.compile(r"-?\d+")


Point = tuple[float, float]
Mark = tuple[float, str]


@dataclass(frozen=True)
class PlotData:
    """What the plot shows; times are seconds since the start of the run."""

    duration: float
    series: dict[str, tuple[Point, ...]] = field(default_factory=dict)
    markers: dict[str, tuple[Mark, ...]] = field(default_factory=dict)

    def describe(self) -> dict:
        """``{"series": {name: points}, "markers": {kind: count}, "duration": s}`` (JSON-able)."""
        return {"duration": round(self.duration, 3),
                "series": {name: len(self.series.get(name, ())) for name in SERIES},
                "markers": {kind: len(self.markers.get(kind, ())) for kind in MARKERS}}


def _names(hosts: Iterable[str]) -> set[str]:
    return {line.rpartition(":")[0] or line for line in hosts}


def _slots(hosts: Iterable[str]) -> int:
    total = 0
    for line in hosts:
        slots = line.rpartition(":")[2]
        total += int(slots) if slots.isdigit() else 1
    return total


def _event_fields(start: float, event: Any) -> tuple[float, str, Any] | None:
    """(seconds since start, kind, detail) of one driver event in any accepted shape."""
    try:
        if isinstance(event, dict):
            when, kind, detail = float(event["time"]) - start, event["kind"], event.get("detail", "")
        elif isinstance(event, (tuple, list)):
            when, kind, detail = float(event[0]) - start, event[1], event[2] if len(event) > 2 else ""
        elif hasattr(event, "t"):
            when, kind, detail = float(event.t), event.kind, getattr(event, "text", "")
        else:
            when, kind, detail = float(event.time) - start, event.kind, getattr(event, "detail", "")
    except (KeyError, IndexError, AttributeError, TypeError, ValueError):
        return None
    return when, str(kind), detail


def _world_size(detail: Any) -> int | None:
    """The world size an event's detail names: ``{"world_size": 3}``, ``3`` or ``"world size 3"``."""
    if isinstance(detail, dict):
        detail = detail.get("world_size")
    if isinstance(detail, int) and not isinstance(detail, bool):
        return detail
    match = _NUMBER.search(detail) if isinstance(detail, str) else None
    return int(match.group()) if match else None


def _detail_text(detail: Any) -> str:
    if isinstance(detail, dict):
        detail = detail.get("reason") or detail.get("error") or ""
    return str(detail)


def _step(points: list[Point], t: float, value: float) -> None:
    if not points or points[-1][1] != value:
        points.append((t, value))


def plot_data(start: float, end: float, snapshots: Sequence[tuple[float, Sequence[str]]],
              records: Sequence[MetricsRecord], events: Sequence[Any] = ()) -> PlotData:
    """The series and markers of a run (pure; see the module docstring)."""
    slots: list[Point] = []
    joins: list[Mark] = []
    leaves: list[Mark] = []
    previous: set[str] | None = None
    for when, hosts in snapshots:
        t = when - start
        names = _names(hosts)
        if previous is None and not names:
            continue  # nothing served yet: not a change (as in timeline.host_events)
        _step(slots, t, _slots(hosts))
        joins += [(t, f"+{h}") for h in sorted(names - (previous or set()))]
        leaves += [(t, f"-{h}") for h in sorted((previous or set()) - names)]
        previous = names

    metric_world: list[Point] = []
    rate: list[Point] = []
    loss: list[Point] = []
    resets: list[Mark] = []
    epochs: list[Mark] = []
    last_resets = 0
    # rates and losses from the periodic records when there are any (an epoch record's rate is
    # the epoch's average, a different quantity)
    periodic = any(r.event == "progress" for r in records)
    for rec in records:
        t = rec.time - start
        _step(metric_world, t, rec.world_size)
        if not (periodic and rec.event != "progress"):
            rate.append((t, float(rec.samples_per_sec)))
            if rec.loss is not None:
                loss.append((t, float(rec.loss)))
        if rec.resets > last_resets:
            resets.append((t, f"reset {rec.resets}"))
            last_resets = rec.resets
        if rec.event == "epoch":
            epochs.append((t, f"epoch {rec.epoch}"))

    driver_world: list[Point] = []
    driver_resets: list[Mark] = []
    others: list[Mark] = []
    first_reset = True
    for event in events:
        fields = _event_fields(start, event)
        if fields is None:
            continue
        t, kind, detail = fields
        low = kind.lower()
        size = _world_size(detail)
        if low == Kind.RESET:  # the driver's: new assignments in effect; the first one is the start
            if size is not None:
                _step(driver_world, t, size)
            if not first_reset:
                driver_resets.append((t, f"reset {len(driver_resets) + 1}"))
            first_reset = False
        elif "world" in low and size is not None:
            _step(driver_world, t, size)
        elif "reset" in low:
            driver_resets.append((t, _detail_text(detail) or kind))
        elif low in MARKED_KINDS:
            text = _detail_text(detail)
            others.append((t, f"{kind}: {text}" if text else kind))
    series = {"world_size": tuple(driver_world or metric_world), "slots_served": tuple(slots),
              "samples_per_sec": tuple(rate), "loss": tuple(loss)}
    markers = {"join": tuple(joins), "leave": tuple(leaves), "reset": tuple(driver_resets or resets),
               "epoch": tuple(epochs), "event": tuple(others)}
    return PlotData(max(0.0, end - start), series, markers)


def check_plot_path(path: str) -> str:
    """``path`` made absolute when it names a PNG or SVG file in an existing directory, else
    ``ConfigError``."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ConfigError(f"--plot {path}: the file name must end in .png or .svg")
    full = os.path.abspath(path)
    if not os.path.isdir(os.path.dirname(full)):
        raise ConfigError(f"--plot {path}: no such directory {os.path.dirname(full)}")
    return full


_STYLE = {"join": ("tab:green", "-"), "leave": ("tab:red", "-"), "reset": ("tab:orange", "--"),
          "epoch": ("0.6", ":"), "event": ("tab:purple", "-.")}


def write_plot(path: str | os.PathLike, data: PlotData, title: str = "elastic-run") -> Path:
    """Draw ``data`` into ``path`` (PNG or SVG by extension), atomically; returns the path.
    Raises ``ConfigError`` for another extension, ``PlotError`` when writing fails."""
    import matplotlib
    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure  # no pyplot: no global figure state, no GUI

    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if f".{fmt}" not in FORMATS:
        raise ConfigError(f"plot {path}: the file name must end in .png or .svg")
    fig = Figure(figsize=(10, 7.5), layout="constrained")
    axes = fig.subplots(3, 1, sharex=True, height_ratios=(2, 1.3, 1.3))
    world_ax, rate_ax, loss_ax = axes
    end = max(data.duration, 1.0)

    def steps(ax, name: str, label: str, **style) -> None:
        points = list(data.series.get(name, ()))
        if not points:
            return
        xs = [p[0] for p in points] + [end]
        ys = [p[1] for p in points] + [points[-1][1]]
        (line,) = ax.step(xs, ys, where="post", label=label, **style)
        line.set_gid(f"series-{name.replace('_', '-')}")

    steps(world_ax, "slots_served", "slots served (discovery)", color="0.55", linestyle="--", linewidth=1.5)
    steps(world_ax, "world_size", "world size (Horovod)", color="tab:blue", linewidth=2.2)
    world_ax.set_ylabel("processes")
    world_ax.yaxis.get_major_locator().set_params(integer=True)
    top = max([p[1] for name in ("slots_served", "world_size") for p in data.series.get(name, ())] or [1])
    world_ax.set_ylim(0, top + 1)
    for ax, name, label, color in ((rate_ax, "samples_per_sec", "samples/s", "tab:green"),
                                   (loss_ax, "loss", "training loss", "tab:red")):
        points = data.series.get(name, ())
        ax.set_ylabel(label)
        if points:
            (line,) = ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", color=color, label=label)
            line.set_gid(f"series-{name.replace('_', '-')}")
        else:
            ax.text(0.5, 0.5, f"no {label} (no training metrics)", transform=ax.transAxes,
                    ha="center", va="center", color="0.5")
    for kind, marks in data.markers.items():
        color, linestyle = _STYLE.get(kind, ("black", ":"))
        texts: dict[float, list[str]] = {}
        for i, (t, text) in enumerate(marks):
            for j, ax in enumerate(axes):
                line = ax.axvline(t, color=color, linestyle=linestyle, linewidth=1, alpha=0.8,
                                  label=kind if (i == 0 and j == 0) else None)
                line.set_gid(f"marker-{kind}-{i}" + (f"-{j}" if j else ""))
            near = [k for k in texts if abs(k - t) <= end / 100]  # labels this close would overlap
            texts.setdefault(near[0] if near else t, []).append(text)
        for t, items in texts.items():  # one label per instant: hosts that came together
            label = " ".join(items) if len(items) <= 3 else f"{' '.join(items[:3])} +{len(items) - 3}"
            if len(label) > MAX_LABEL:  # a label runs down its line inside the world-size panel
                label = label[:MAX_LABEL - 1] + "…"
            note = world_ax.annotate(label, (t, 1), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                                     va="top", ha="right", color=color, xytext=(-2, -2),
                                     textcoords="offset points")
            note.set_in_layout(False)  # never stretches the figure, whatever the text
    fig.legend(loc="outside lower center", fontsize=8, ncols=7)
    loss_ax.set_xlabel("seconds since start")
    loss_ax.set_xlim(0, end)
    fig.suptitle(title)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fig.savefig(tmp, format=fmt, metadata={"Description": json.dumps(data.describe(), sort_keys=True)})
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise PlotError(f"cannot write the plot {path}: {exc.strerror or exc}") from exc
    return path


def _png_text(data: bytes) -> dict[str, str]:
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise PlotError("not a PNG file")
    out, pos = {}, 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        elif kind == b"zTXt":
            key, _, rest = body.partition(b"\0")
            out[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        elif kind == b"iTXt":
            key, _, rest = body.partition(b"\0")
            compressed, rest = rest[0], rest[2:]
            _lang, _, rest = rest.partition(b"\0")
            _tkey, _, text = rest.partition(b"\0")
            out[key.decode("latin-1")] = (zlib.decompress(text) if compressed else text).decode("utf-8")
        elif kind == b"IEND":
            break
    return out


def read_description(path: str | os.PathLike) -> dict:
    """The ``describe()`` document a plot written by ``write_plot`` carries (PNG or SVG).
    Raises ``PlotError`` when the file has none."""
    path = Path(path)
    try:
        if path.suffix.lower() == ".png":
            text = _png_text(path.read_bytes()).get("Description")
        else:
            root = ET.parse(path).getroot()
            found = root.find(".//{http://purl.org/dc/elements/1.1/}description")
            text = None if found is None else found.text
            if text is None and found is not None:  # newer matplotlib: <dc:description>…</dc:description>
                text = "".join(found.itertext())
        if not text:
            raise PlotError(f"{path}: no plot description in the file")
        return json.loads(text)
    except (OSError, ET.ParseError, ValueError) as exc:
        raise PlotError(f"{path}: cannot read the plot: {exc}") from exc
