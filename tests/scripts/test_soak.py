"""scripts/soak: the fault schedule and the invariant checks (pure, by tables of cases), its
flags, and one short soak on the local cluster with a fixed seed whose saved result, checked
again with a sample dropped, fails and names the invariant and the fault before it."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS / "benchmarks"))  # the soak's modules

import soak_checks as sc  # noqa: E402
import soak_plan as sp  # noqa: E402

SOAK = str(SCRIPTS / "soak")


# -- the schedule ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, n, ok", [
    ("add", 4, False), ("add", 3, True),
    ("kill", 2, False), ("kill", 3, True), ("freeze-thaw", 2, False),
    ("below-min", 2, True), ("below-min", 1, False),
    ("api-restart", 1, True), ("flap", 2, True),
])
def test_a_fault_is_drawn_only_where_the_world_allows_it(kind, n, ok):
    assert sp.allowed(kind, sp.World(n, min_np=2, max_pods=4)) is ok


def test_a_seed_replays_the_same_schedule():
    def draw(seed):
        rng, used, out = random.Random(seed), set(), []
        for pods in (3, 3, 4, 2, 3, 3, 2, 4, 3, 3):
            k = sp.next_fault(rng, sp.World(pods, 2, 4), used)
            used.add(k)
            out.append((k, round(sp.gap(rng), 3)))
        return out

    assert draw(5) == draw(5)
    assert draw(5) != draw(6)


def test_kinds_not_drawn_yet_come_first_so_a_short_soak_covers_many():
    rng, used = random.Random(1), set()
    for _ in range(12):
        used.add(sp.next_fault(rng, sp.World(3, 2, 4), used))
    assert len(used) >= 8


def test_bad_kinds_are_refused():
    with pytest.raises(ValueError, match="--kinds wants"):
        sp.parse_kinds("add,bogus")
    assert sp.parse_kinds("all") == sp.KINDS


# -- the invariants ----------------------------------------------------------------------------
def commits(size=8, epochs=2, t0=100.0):
    out, t = [], t0
    for e in range(epochs):
        for i in range(0, size, 2):
            t += 1
            out.append({"epoch": e, "time": t, "size": 2, "rank": i % 2, "indices": [i, i + 1]})
    return out


def test_exactly_once_holds_and_names_a_dropped_or_repeated_sample():
    assert sc.samples_exactly_once(commits(), 8, 2).ok
    dropped = commits()
    dropped[5]["indices"] = dropped[5]["indices"][1:]
    c = sc.samples_exactly_once(dropped, 8, 2)
    assert not c.ok and "epoch 2: 1 of 8 samples never committed" in c.detail and c.when == 108.0
    repeated = commits() + [{"epoch": 0, "time": 150.0, "size": 2, "rank": 0, "indices": [3]}]
    c = sc.samples_exactly_once(repeated, 8, 2)
    assert not c.ok and "sample 3 committed twice" in c.detail and c.when == 150.0
    assert not sc.samples_exactly_once(commits(epochs=1), 8, 2).ok  # an epoch missing


def two_phase(size=8, epochs=2, t0=100.0):
    """The lines two ranks write (training.commits): ``trained`` before each commit's
    collective, ``committed`` after its save; two samples per rank per commit."""
    out, t = [], t0
    for e in range(epochs):
        for processed in range(4, size + 1, 4):
            t += 1
            for rank in (0, 1):
                first = processed - 4 + 2 * rank
                base = {"epoch": e, "size": 2, "rank": rank, "resets": 0, "processed": processed}
                out.append({**base, "phase": "trained", "time": t, "indices": [first, first + 1]})
                out.append({**base, "phase": "committed", "time": t + 0.5})
    return out


def test_exactly_once_counts_a_rank_killed_between_its_commits_collective_and_its_mark():
    """A rank killed once a commit's collective completed, before its ``committed`` mark: its
    samples were trained and committed (the soak once reported 128 such samples "never
    committed"); a commit no rank marked (rolled back) counts nothing, and the samples it
    held, trained again in the next world, count once."""
    lines = two_phase()
    killed = [r for r in lines if not (r["phase"] == "committed" and r["epoch"] == 1 and r["processed"] == 4
                                       and r["rank"] == 0)]
    assert len(killed) == len(lines) - 1
    assert sc.samples_exactly_once(killed, 8, 2).ok
    # the epoch's last commit failed on every rank, then a world of one (resets 1) trained it
    rolled = [r for r in lines if not (r["phase"] == "committed" and r["epoch"] == 1 and r["processed"] == 8)]
    again = {"epoch": 1, "size": 1, "rank": 0, "resets": 1, "processed": 8}
    rolled += [{**again, "phase": "trained", "time": 200.0, "indices": [4, 5, 6, 7]},
               {**again, "phase": "committed", "time": 200.5}]
    assert sc.samples_exactly_once(rolled, 8, 2).ok
    # ... and without that retry its samples are missing
    c = sc.samples_exactly_once(rolled[:-2], 8, 2)
    assert not c.ok and "epoch 2: 4 of 8 samples never committed" in c.detail
    # a commit nobody marked is not taken for one however its lines are read
    unmarked = [r for r in lines if not (r["phase"] == "committed" and r["epoch"] == 0 and r["processed"] == 4)]
    c = sc.samples_exactly_once(unmarked, 8, 2)
    assert not c.ok and "epoch 1: 4 of 8 samples never committed" in c.detail


def test_the_fault_before_a_failure_is_named():
    faults = [sc.Fault("kill", "p1", 100.0, 101.0, 2), sc.Fault("flap", "p2", 200.0, 202.0, 3)]
    assert sc.preceding_fault(faults, 150.0).kind == "kill"
    assert sc.preceding_fault(faults, 250.0).kind == "flap"
    assert sc.preceding_fault(faults, 50.0) is None and sc.preceding_fault(faults, None) is None


def test_growth_of_the_driver_is_caught():
    flat = [sc.Sample(float(t), 100.0, 20, 30, 1000 + t) for t in range(12)]
    assert sc.bounded(flat).ok
    leak = [sc.Sample(float(t), 100.0 + 40 * t, 20, 30, 1000) for t in range(12)]
    c = sc.bounded(leak)
    assert not c.ok and "rss_mb grew" in c.detail
    chatty = [sc.Sample(t * 60.0, 100.0, 20, 30, t * 60 * 100_000) for t in range(12)]  # 100 kB/s
    assert "GiB/day" in sc.bounded(chatty).detail
    assert not sc.bounded(flat[:3]).ok  # too few samples is not a pass


def test_same_parameters_and_leftovers_and_pods():
    finals = [{"rank": 0, "params_sha256": "a"}, {"rank": 1, "params_sha256": "a"}]
    assert sc.same_parameters(finals, 2).ok
    assert not sc.same_parameters([*finals[:1], {"rank": 1, "params_sha256": "b"}]).ok
    assert not sc.same_parameters([]).ok
    assert sc.no_leftovers([]).ok and not sc.no_leftovers(["123 python -m training.mnist"]).ok
    assert sc.all_pods_used(3, 3, 4, None).ok and not sc.all_pods_used(3, 2, 4, 5.0).ok
    assert sc.all_pods_used(5, 4, 4, None).ok  # capped by --max-np


def worker(rank, size, resets, t):
    return {"host": f"h{rank}", "pid": 100 + rank, "time": t, "rank": rank, "size": size, "resets": resets}


def test_a_world_held_before_its_last_step_is_at_its_size_without_a_commit():
    """The CI seed's false alarm: a world of 2 reached the hold before the run's last step (no
    commits there), a third pod's joiner formed a world of 3 with it: the job was at size 3."""
    commits = [{"epoch": 2, "time": 236.0, "size": 2, "rank": 0, "indices": [1]}]
    workers = [worker(0, 3, 6, 278.5), worker(1, 3, 6, 278.6), worker(2, 3, 6, 278.6)]
    assert sc.world_now(commits, workers) == 3
    assert sc.at_size(3, 240.0, commits, workers) == 278.6
    assert sc.at_size(2, 240.0, commits, workers) is None  # the commit at 2 came before
    assert sc.world_now(commits, []) == 2 and sc.world_now([], []) is None


@pytest.mark.parametrize("workers, why", [
    ([worker(0, 3, 6, 278.5), worker(1, 3, 6, 278.6)], "rank 2 never reset into it"),
    ([worker(0, 3, 6, 278.5), worker(1, 3, 6, 278.6), worker(2, 3, 5, 200.0)], "rank 2 of another world"),
    ([worker(0, 3, 6, 230.0), worker(1, 3, 6, 230.0), worker(2, 3, 6, 230.0)], "formed before the last commit"),
    ([worker(0, 3, 6, 278.5), worker(1, 2, 7, 290.0), worker(2, 3, 6, 278.6)], "rank 1 is in a later world"),
])
def test_a_world_counts_only_whole_and_after_the_last_commit(workers, why):
    commits = [{"epoch": 2, "time": 236.0, "size": 2, "rank": 0, "indices": [1]}]
    assert sc.world_now(commits, workers) == 2, why
    assert sc.at_size(3, 240.0, commits, workers) is None, why


def test_the_first_commit_at_a_size_after_a_moment_is_when_it_got_there():
    commits = [{"time": t, "size": n} for t, n in ((10.0, 3), (20.0, 2), (25.0, 3), (30.0, 3))]
    assert sc.at_size(3, 20.0, commits, []) == 25.0
    assert sc.at_size(4, 0.0, commits, [{"time": "bad"}, {}]) is None  # a torn record is skipped


def test_a_job_in_the_last_steps_of_its_last_epoch_is_out_of_work():
    done = commits(size=8, epochs=3)
    assert sc.out_of_work(done, 8, 3, slack=0)
    assert not sc.out_of_work(done[:-1], 8, 3, slack=0) and sc.out_of_work(done[:-1], 8, 3, slack=2)
    assert not sc.out_of_work(commits(size=8, epochs=2), 8, 3, slack=4)  # an epoch to go


def test_a_fault_that_met_a_waiting_job_has_no_pause():
    faults = [sc.Fault("daemon-kill", "pid 1", 10.5, 10.6, 2, recovered=11.0, outcome=sc.WAITING)]
    sc.pauses(faults, [8.0, 9.0, 10.0, 60.0])
    assert faults[0].pause is None and sc.summarize_pauses(faults) == [("daemon-kill", 1, None, None)]


def test_pauses_are_the_longest_gap_around_a_fault():
    faults = [sc.Fault("kill", "p", 10.5, 10.6, 2, recovered=14.0)]
    sc.pauses(faults, [8.0, 9.0, 10.0, 12.5, 14.0, 15.0])
    assert faults[0].pause == pytest.approx(2.5)
    summary = sc.summarize_pauses(faults + [sc.Fault("kill", "q", 20, 21, 2, recovered=None)])
    assert summary == [("kill", 2, pytest.approx(2.5), pytest.approx(2.5))]


# -- the command ---------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--minutes", "0"], "--minutes must be positive"),
    (["--faults", "0"], "--faults must be at least 1"),
    (["--kinds", "add,nope"], "--kinds wants a comma list"),
    (["--pods", "9"], "--pods must be between --min-np and --max-np"),
    (["--check-only", "/nonexistent/soak"], "no soak result in /nonexistent/soak"),
])
def test_bad_flags_are_one_line_errors(argv, message):
    proc = subprocess.run([sys.executable, SOAK, *argv], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.horovod
@pytest.mark.timeout(900)
def test_faults_while_the_job_waits_before_its_last_step_recover(tmp_path):
    """A job out of epochs at once (a tiny dataset at full speed) waits before its last step
    (the soak's hold), where it commits nothing. The discovery daemon killed then: the world
    is still whole at its size (no pause measured). A pod added then gets a worker and the
    world of 3 forms: the soak sees it (the ranks' resets at size 3), the end check holds.
    Judged by commits alone, neither recovered and the world looked stuck at 2 (the false
    alarm of CI seed 20261126: '3 Ready pods, world size 2')."""
    work = tmp_path / "soak"
    proc = subprocess.run([sys.executable, SOAK, "--minutes", "0.5", "--faults", "2", "--seed", "8", "--pods", "2",
                           "--kinds", "add,daemon-kill", "--train", "128", "--step-delay", "0",
                           "--recover-timeout", "150", "--work", str(work)],
                          capture_output=True, text=True, timeout=850, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "fault 1: daemon-kill" in proc.stderr and "fault 2: add" in proc.stderr, proc.stderr
    assert re.search(r"2 faults of 2 kinds", proc.stdout), proc.stdout
    assert re.search(r"no healthy pod left without a worker at the end\s+yes\s+3 Ready pods, world size 3",
                     proc.stdout), proc.stdout
    assert re.search(r"every rank ended with the same parameters\s+yes\s+3 ranks", proc.stdout), proc.stdout


def load_soak_script():
    """scripts/soak as a module (it has no .py suffix), under this venv's Python."""
    loader = importlib.machinery.SourceFileLoader("soak_script", SOAK)
    spec = importlib.util.spec_from_loader("soak_script", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_after_an_api_restart_fault_the_api_serves_for_the_next_fault(tmp_path):
    """The api-restart fault's action ends when the API server serves again: the next fault
    (a pod added, deleted, flapped) uses the API at once. Before, it ended once the server had
    stopped, and a next fault drawn within the down time (2-6 s; the gaps are 2-8 s and training
    recovers at once) failed the soak: "cannot reach the cluster API" (seed 49020243)."""
    soak_script = load_soak_script()
    from localcluster.testing import running_cluster

    args = soak_script.parse(["--seed", "3", "--kinds", "api-restart", "--work", str(tmp_path)])
    with running_cluster(tmp_path / "cluster") as cluster:
        soak = soak_script.Soak(args, cluster, tmp_path)
        fault = soak.inject("api-restart")
        assert isinstance(cluster.client.list_pods("default"), list)  # no ClusterError
        assert fault.end - fault.start >= float(fault.target.split()[0]), fault


CI_SEED = 20261126


@pytest.mark.slow
@pytest.mark.horovod
@pytest.mark.timeout(1500)
def test_a_short_soak_keeps_every_invariant(tmp_path):
    """A 3-minute soak with a fixed seed (CI's): every invariant holds. Then the same run's
    result, checked again with one committed sample dropped, fails and names the invariant
    and the fault before it."""
    work = tmp_path / "soak"
    proc = subprocess.run([sys.executable, SOAK, "--minutes", "3", "--seed", str(CI_SEED), "--work", str(work)],
                          capture_output=True, text=True, timeout=1400, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"every sample trained exactly once per epoch\s+yes", proc.stdout), proc.stdout
    faults = re.search(r"(\d+) faults of (\d+) kinds", proc.stdout)
    assert faults and int(faults[1]) >= 5, proc.stdout
    assert (work / "soak.png").stat().st_size > 0

    again = subprocess.run([sys.executable, SOAK, "--check-only", str(work), "--drop-sample"],
                           capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert again.returncode == 1, again.stdout + again.stderr
    failed = [line for line in again.stderr.splitlines() if line.startswith("soak: FAILED")]
    assert len(failed) == 1, again.stderr
    assert "every sample trained exactly once per epoch" in failed[0] and "samples never committed" in failed[0]
    assert "(after fault: " in failed[0], failed[0]
