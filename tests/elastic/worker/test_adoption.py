"""The adoption window, with the real lease wrapper (elastic.worker.lease --adopt-window) and
the driver's real answers (elastic.driver.lease_answers) on Horovod's rendezvous server: a
worker whose session ends trains on, its output in a log on the host; a leader that adopts it
keeps it past the window; the driver that started it never does; unadopted, it ends at the
window's end, its children with it."""
from __future__ import annotations

import os
import select
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from horovod.runner.elastic.rendezvous import create_rendezvous_handler
from horovod.runner.http.http_server import RendezvousHandler, RendezvousServer

from elastic.driver import lease_answers
from elastic.driver.lease_answers import Claim
from elastic.environment import HOROVOD_ELASTIC_DRIVER_WAIT
from tests.runtime.liveness import pid_gone
from tests.waiting import wait_for

LEASE, WINDOW = 5, 6
# the tests that adopt: room for the claim, one question and the adoption on a loaded machine
ADOPT_WINDOW = 15

# the training stand-in: a line a step on stdout and stderr, its step count in ./steps
TRAINING = """
import os, sys, time
with open("pid", "w") as f:
    f.write(str(os.getpid()))
i = 0
while True:
    if os.path.exists("exit"):
        sys.exit(int(open("exit").read()))
    i += 1
    print(f"step {i}", flush=True)
    print(f"step {i} on stderr", file=sys.stderr, flush=True)
    with open("steps.tmp", "w") as f:
        f.write(str(i))
    os.replace("steps.tmp", "steps")
    time.sleep(0.05)
"""


@pytest.fixture
def driver(monkeypatch):
    """Horovod's rendezvous server answering the lease of run ``run-a``: (its port, answers)."""
    monkeypatch.setattr(RendezvousHandler, "do_GET", RendezvousHandler.do_GET)  # undone after
    answers = lease_answers.install("run-a")
    server = RendezvousServer()
    port = server.start(create_rendezvous_handler(driver=None))
    yield port, answers
    server.stop()


class Worker:
    """The wrapper running TRAINING, its stdout and stderr on pipes this test reads (the ssh
    session) until ``end_session`` closes them."""

    def __init__(self, tmp_path: Path, port: int, *args: str):
        self.dir = tmp_path
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        env = dict(os.environ, HOROVOD_GLOO_RENDEZVOUS_ADDR="127.0.0.1", HOROVOD_GLOO_RENDEZVOUS_PORT=str(port),
                   ELASTIC_RUN_ID="run-a", HOROVOD_HOSTNAME="worker-1", HOROVOD_LOCAL_RANK="0", TMPDIR=str(tmp_path))
        (tmp_path / "train.py").write_text(TRAINING)
        self.proc = subprocess.Popen([sys.executable, "-m", "elastic.worker.lease", "--seconds", str(LEASE),
                                      *args, "--", sys.executable, "train.py"], cwd=tmp_path, env=env,
                                     stdin=subprocess.DEVNULL, stdout=out_w, stderr=err_w, start_new_session=True)
        os.close(out_w)
        os.close(err_w)
        self.readers: list[int] | None = [out_r, err_r]
        self.seen = b""

    def read(self) -> bytes:
        """What the session got so far (without blocking)."""
        while self.readers and select.select(self.readers, [], [], 0)[0]:
            for fd in select.select(self.readers, [], [], 0)[0]:
                self.seen += os.read(fd, 65536)
        return self.seen

    def end_session(self) -> None:
        for fd in self.readers or ():
            os.close(fd)
        self.readers = None

    def steps(self) -> int:
        try:
            return int((self.dir / "steps").read_text())
        except (FileNotFoundError, ValueError):
            return 0

    def training_pid(self) -> int:
        return int(wait_for(lambda: (self.dir / "pid").exists() and (self.dir / "pid").read_text(), 60,
                            "the training's pid"))

    def log(self) -> str:
        logs = list(self.dir.glob("elastic-run-worker-0-*.log"))
        return logs[0].read_text(errors="replace") if logs else ""

    def running(self) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"the wrapper ended ({self.proc.returncode}); its log:\n{self.log()}", pytrace=False)

    def trains_on(self, what: str) -> None:
        """The training takes 10 more steps while the wrapper runs."""
        start = self.steps()
        wait_for(lambda: self.steps() >= start + 10, 60, what, alive=self.running)

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.end_session()


@pytest.fixture
def worker_of(tmp_path):
    made: list[Worker] = []

    def make(port: int, *args: str) -> Worker:
        made.append(Worker(tmp_path, port, *args))
        return made[-1]
    yield make
    for w in made:
        w.close()


def claim_of(answers, proc: subprocess.Popen) -> Claim:
    return wait_for(lambda: next((c for c in answers.waiting() if c.pid == proc.pid), None), 60,
                    "the orphan's claim at the driver")


@pytest.mark.timeout(180)
def test_an_orphan_adopted_within_its_window_trains_on_and_ends_when_its_leader_lets_go(driver, worker_of):
    port, answers = driver
    w = worker_of(port, "--adopt-window", str(ADOPT_WINDOW))
    training = w.training_pid()
    wait_for(lambda: b"step 5\n" in w.read() and b"step 5 on stderr" in w.read(), 60,
             "the training's output through the session")
    w.end_session()
    claim = claim_of(answers, w.proc)
    orphaned = time.monotonic()
    assert claim == Claim("run-a", "worker-1", 0, w.proc.pid)
    answers.adopt(claim)
    wait_for(lambda: "adopted by the new leader" in w.log(), 30, "the adoption", alive=w.running)
    w.trains_on("the orphan to train on, its session gone")
    wait_for(lambda: time.monotonic() > orphaned + ADOPT_WINDOW + 3, 60, "the window to pass", alive=w.running)
    w.trains_on("the adopted worker to train on past its window")
    log = w.log()
    assert "nobody reads this worker's output" in log and f"goes on for up to {ADOPT_WINDOW} s" in log, log
    assert "step" in log.split("adopted by the new leader")[-1], log  # its output goes on, into the log
    released = time.monotonic()
    answers.release(claim)
    wait_for(lambda: w.proc.poll() is not None, 90, "the worker to end once its leader let go")
    assert time.monotonic() - released >= LEASE + ADOPT_WINDOW - 1, "ended before its lease and window ran out"
    assert w.proc.returncode == -signal.SIGKILL
    assert f"no leader adopted it within {ADOPT_WINDOW} s" in w.log(), w.log()
    wait_for(lambda: pid_gone(training), 10, "the training to end with its wrapper")


@pytest.mark.timeout(180)
def test_an_adopted_workers_exit_reaches_its_leader_on_the_lease_wire(driver, worker_of):
    """The adopting leader has no ssh session to see its workers' exits: the wrapper of an
    adopted worker whose training ends tells it the code, and exits with it."""
    port, answers = driver
    w = worker_of(port, "--adopt-window", str(ADOPT_WINDOW))
    w.training_pid()
    w.end_session()
    claim = claim_of(answers, w.proc)
    answers.adopt(claim)
    wait_for(lambda: "adopted by the new leader" in w.log(), 30, "the adoption", alive=w.running)
    assert answers.take_exits() == []
    (w.dir / "exit").write_text("3")
    wait_for(lambda: w.proc.poll() is not None, 60, "the training to end")
    assert w.proc.returncode == 3
    assert answers.take_exits() == [(claim, 3)]
    assert "the training exited 3: its leader was told" in w.log(), w.log()


@pytest.mark.timeout(180)
def test_an_attached_workers_exit_is_not_reported_on_the_wire(driver, worker_of):
    """A worker still in its session: its exit reaches the driver that started it through
    that session, as before; nothing is reported on the lease wire."""
    port, answers = driver
    w = worker_of(port, "--adopt-window", str(ADOPT_WINDOW))
    w.training_pid()
    (w.dir / "exit").write_text("4")
    wait_for(lambda: w.proc.poll() is not None, 60, "the training to end")
    assert w.proc.returncode == 4
    assert answers.take_exits() == [] and answers.waiting() == {}


@pytest.mark.timeout(180)
def test_an_orphan_nobody_adopts_ends_at_its_windows_end_and_the_old_driver_never_holds_it(driver, worker_of):
    port, answers = driver
    w = worker_of(port, "--adopt-window", str(WINDOW))
    training = w.training_pid()
    wait_for(lambda: b"step 3\n" in w.read(), 60, "the training's output through the session")
    ended = time.monotonic()
    w.end_session()
    claim_of(answers, w.proc)  # it asks the driver that started it, which refuses
    w.trains_on("the orphan to train on during its window")
    wait_for(lambda: w.proc.poll() is not None, 60, "the unadopted worker to end")
    assert time.monotonic() - ended >= WINDOW - 0.5, "ended before its window ran out"
    log = w.log()
    assert f"no leader adopted it within {WINDOW} s" in log, log
    assert "step" in log and "on stderr" in log, log  # both streams went on into the log
    wait_for(lambda: pid_gone(training), 10, "the training to end with its wrapper")


@pytest.mark.timeout(120)
def test_without_a_window_the_session_s_end_still_ends_the_worker_at_once(driver, worker_of):
    port, _ = driver
    w = worker_of(port)
    w.training_pid()
    wait_for(lambda: b"step 3\n" in w.read(), 60, "the training's output")
    w.end_session()
    # its driver answers: only the session's end ends it (the wrapper's check, or the
    # training's next write to the closed session); a window would leave a log, none is left
    wait_for(lambda: w.proc.poll() is not None, 30, "the worker to end")
    assert not list(w.dir.glob("elastic-run-worker-*.log"))


# The launcher as horovodrun is to a worker it runs without ssh: it starts the wrapper tied to
# itself (PR_SET_PDEATHSIG, SIGTERM: patch 0102's safe_shell_exec), then waits to be killed.
TIED_LAUNCHER = """
import ctypes, signal, subprocess, sys
def tie():
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)
subprocess.Popen(sys.argv[1:], preexec_fn=tie, start_new_session=True)
signal.pause()  # until the test kills it
"""


@pytest.mark.timeout(180)
def test_the_launchers_death_signal_is_the_sessions_loss_not_a_leave(driver, tmp_path):
    """A worker horovodrun runs without ssh gets SIGTERM when horovodrun dies (its death
    signal): with a window, the wrapper takes it as its session's loss, not as a request to
    leave. The training is not signalled, trains on and waits to be adopted; adopted, it trains
    on. Without the window the same signal would end it (forwarded, as before)."""
    port, answers = driver
    (tmp_path / "train.py").write_text(TRAINING)
    env = dict(os.environ, HOROVOD_GLOO_RENDEZVOUS_ADDR="127.0.0.1", HOROVOD_GLOO_RENDEZVOUS_PORT=str(port),
               ELASTIC_RUN_ID="run-a", HOROVOD_HOSTNAME="worker-1", HOROVOD_LOCAL_RANK="0", TMPDIR=str(tmp_path))
    launcher = subprocess.Popen([sys.executable, "-c", TIED_LAUNCHER, sys.executable, "-m", "elastic.worker.lease",
                                 "--seconds", str(LEASE), "--adopt-window", str(ADOPT_WINDOW), "--",
                                 sys.executable, "train.py"], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    training = None
    try:
        training = int(wait_for(lambda: (tmp_path / "pid").exists() and (tmp_path / "pid").read_text(), 60,
                                "the training's pid"))
        launcher.kill()
        launcher.wait()
        claim = wait_for(lambda: next(iter(answers.waiting()), None), 60, "the orphan's claim at the driver")
        assert (claim.host, claim.slot) == ("worker-1", 0)
        answers.adopt(claim)

        def steps() -> int:
            try:
                return int((tmp_path / "steps").read_text())
            except (FileNotFoundError, ValueError):
                return 0
        def log() -> str:
            return "".join(p.read_text(errors="replace") for p in tmp_path.glob("elastic-run-worker-0-*.log"))
        # the wrapper hears of its adoption at its next question (one a second): wait for its line
        wait_for(lambda: "adopted by the new leader" in log() or pid_gone(training), 60,
                 "the wrapper to say it was adopted", detail=log)
        start = steps()
        wait_for(lambda: steps() >= start + 20 or pid_gone(training), 60, "the adopted training to train on")
        assert not pid_gone(training), "the launcher's death signal ended the training"
        assert "adopted by the new leader" in log(), log()
    finally:
        if training is not None and not pid_gone(training):
            os.killpg(os.getpgid(training), signal.SIGKILL)


@pytest.mark.parametrize("given, seen", [(None, "30"), ("7", "7")])
def test_the_training_waits_for_a_driver_in_a_reset_for_the_window(given, seen):
    """The training gets the window as ``HOROVOD_ELASTIC_DRIVER_WAIT`` (fork patch 0112: a
    reset begun while no launcher leads waits that long for the one that adopts it), unless
    the environment already says how long."""
    env = {k: v for k, v in os.environ.items() if k != HOROVOD_ELASTIC_DRIVER_WAIT}
    if given is not None:
        env[HOROVOD_ELASTIC_DRIVER_WAIT] = given
    proc = subprocess.run([sys.executable, "-m", "elastic.worker.lease", "--adopt-window", "30", "--",
                           sys.executable, "-c", f"import os; print(os.environ.get({HOROVOD_ELASTIC_DRIVER_WAIT!r}))"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == seen


@pytest.mark.parametrize("value", ["2", "-1", "nan", "4000"])
def test_a_bad_window_is_one_line_and_exit_2(value):
    proc = subprocess.run([sys.executable, "-m", "elastic.worker.lease", "--adopt-window", value, "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "adoption window must be 0 (none) or 5..3600 seconds" in proc.stderr


@pytest.mark.timeout(240)
def test_through_a_real_ssh_session_killed_the_training_trains_on_and_is_adopted(driver, cluster, tmp_path):
    """Horovod starts each worker as `ssh HOST COMMAND`: the ssh client is SIGKILLed (its
    launcher gone), sshd on the pod ends the session. The training in the pod trains on, is
    adopted within the window, and lives on past it; what sshd does at a session's end (closed
    pipes, no signal that reaches the training) is the real one's."""
    port, answers = driver
    cluster.create_pod("w1")
    ip = cluster.wait_ready("w1")
    (tmp_path / "train.py").write_text(TRAINING)
    env = {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
           "ELASTIC_RUN_ID": "run-a", "HOROVOD_HOSTNAME": "w1", "HOROVOD_LOCAL_RANK": "0", "TMPDIR": str(tmp_path),
           "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    remote = " ".join(["cd", shlex.quote(str(tmp_path)), "&&", "env",
                       *(shlex.quote(f"{k}={v}") for k, v in env.items()),
                       shlex.quote(sys.executable), "-m", "elastic.worker.lease", "--seconds", str(LEASE),
                       "--adopt-window", str(ADOPT_WINDOW), "--", shlex.quote(sys.executable), "train.py"])
    ssh = subprocess.Popen(cluster.ssh_command(ip) + [remote], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    w = Worker.__new__(Worker)
    w.dir, w.proc = tmp_path, ssh
    try:
        wait_for(lambda: w.steps() >= 5, 90, "the training to run in the pod")
        os.killpg(ssh.pid, signal.SIGKILL)
        ssh.wait()
        claim = wait_for(lambda: next((c for c in answers.waiting() if c.host == "w1"), None), 60,
                         "the orphan's claim at the driver")
        orphaned = time.monotonic()
        assert (claim.run_id, claim.slot) == ("run-a", 0)

        def steps_go_on(what: str) -> None:
            start = w.steps()
            wait_for(lambda: w.steps() >= start + 10, 60, what, detail=w.log)
        answers.adopt(claim)
        wait_for(lambda: "adopted by the new leader" in w.log(), 30, "the adoption", detail=w.log)
        steps_go_on("the training to train on, its ssh session gone")
        wait_for(lambda: time.monotonic() > orphaned + ADOPT_WINDOW + 3, 60, "the window to pass")
        steps_go_on("the adopted training to train on past its window")
    finally:
        if ssh.poll() is None:
            os.killpg(ssh.pid, signal.SIGKILL)
            ssh.wait()
        cluster.delete_pod("w1", grace_seconds=1)
        cluster.wait_gone("w1", timeout=60)
