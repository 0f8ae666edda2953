"""The worker image run through its own entrypoint, least-privilege as deploy/ runs it (all
capabilities dropped but SETUID, SETGID, SYS_CHROOT; no-new-privileges): SIGTERM reaches what
runs over ssh, every container has its own host key, sshd takes the job key and nothing else,
and a GPU pod that cannot use CUDA fails at start."""
from __future__ import annotations

import subprocess

import paramiko
import pytest

from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(3600)

# A stand-in for a training rank: on SIGTERM it writes /data/term and exits 0 after a short
# "save"; started over ssh in the foreground of the session, as horovodrun starts ranks.
RANK = ("import os, signal, sys, time\n"
        "def on_term(*_):\n"
        "    time.sleep(1)\n"
        "    open('/data/term.tmp', 'w').write(str(os.getpid()))\n"
        "    os.rename('/data/term.tmp', '/data/term')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        "open('/data/started', 'w').write('1')\n"
        "while True:\n"
        "    time.sleep(0.1)\n")


def test_stopping_the_container_delivers_sigterm_to_a_process_started_over_ssh(run_worker):
    w = run_worker(1)
    (w.data / "rank.py").write_text(RANK)
    session = subprocess.Popen(w.ssh_argv() + ["python3 /data/rank.py"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (w.data / "started").exists(), 60, "the rank to start over ssh")
        took = w.stop(grace=60)
        assert (w.data / "term").exists(), f"the rank got no SIGTERM; log: {w.log.read_text()[-1500:]}"
        # it left on its own (about 1 s of "saving"), not by the SIGKILL at the end of the grace
        assert took < 50, f"stop took {took:.0f} s: the rank was killed, not stopped"
        assert session.wait(timeout=60) == 0  # the session ended with the rank's own exit code
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()
    assert "forwarding SIGTERM to the job's trainers" in w.log.read_text()


# A rank with the training's own DataLoader (training.loaders.make_loader: forkserver, two
# persistent loading processes) and its own SIGTERM handling (training.signals): after the
# SIGTERM it goes on fetching batches to its "next commit", writes /data/commit and leaves
# with 143. Had its loaders been signalled too, the next fetch would raise "DataLoader worker
# exited unexpectedly" and the rank would exit 1 without a commit.
LOADER_MODULE = ("import torch\n"
                 "from torch.utils.data import Dataset\n"
                 "class Numbers(Dataset):\n"
                 "    def __len__(self):\n"
                 "        return 1 << 30\n"
                 "    def __getitem__(self, i):\n"
                 "        return torch.tensor([float(i)])\n"
                 "class Forever:\n"
                 "    def __iter__(self):\n"
                 "        i = 0\n"
                 "        while True:\n"
                 "            yield list(range(i, i + 4))\n"
                 "            i += 4\n")
LOADER_RANK = ("import os, sys, time\n"
               "sys.path.insert(0, '/data')\n"
               "from numbers_ds import Forever, Numbers\n"
               "from training.loaders import make_loader\n"
               "from training.signals import EXIT_TERM, StopFlags, leave\n"
               "if __name__ == '__main__':\n"
               "    flags = StopFlags(grace=60).install()\n"
               "    batches = iter(make_loader(Numbers(), Forever(), workers=2, pin_memory=False))\n"
               "    next(batches)\n"
               "    open('/data/started', 'w').write('1')\n"
               "    after = 0\n"
               "    while True:\n"
               "        batch = next(batches)\n"
               "        time.sleep(0.05)\n"
               "        after += flags.term\n"
               "        if after == 20:\n"
               "            open('/data/commit.tmp', 'w').write(str(int(batch[0].item())))\n"
               "            os.rename('/data/commit.tmp', '/data/commit')\n"
               "            leave(EXIT_TERM, 'SIGTERM: committed, leaving')\n")


def test_sigterm_reaches_the_trainer_and_not_its_forkserver_loaders(run_worker):
    """SIGTERM to the pod -> the trainer commits with its loaders alive -> exit 143."""
    w = run_worker(1)
    (w.data / "numbers_ds.py").write_text(LOADER_MODULE)
    (w.data / "rank.py").write_text(LOADER_RANK)
    # as horovodrun starts a rank: a shell command line over ssh, python a child of the shell
    session = subprocess.Popen(w.ssh_argv() + ["cd /data > /dev/null 2>&1 ; /opt/venv/bin/python rank.py"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: (w.data / "started").exists() or session.poll() is not None, 300, "the rank's first batch")
        assert session.poll() is None, session.communicate()[0]
        # the container's view: one trainer; the shell, the forkserver and the loaders are not
        listing = w.ssh("/usr/local/bin/job-processes --entrypoint \"$(pgrep -P 1 -f worker-entrypoint)\" list; "
                        "ps -eo pid,ppid,comm")
        kinds = [line.split()[0] for line in listing.stdout.splitlines() if line.startswith(("trainer ", "other "))]
        assert kinds.count("trainer") == 1 and kinds.count("other") >= 3, listing.stdout  # forkserver, 2 loaders
        w.stop(grace=120)
        output = session.communicate(timeout=60)[0]
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()
    assert "exited unexpectedly" not in output, output
    assert (w.data / "commit").exists(), f"no commit; rank: {output[-1500:]}; log: {w.log.read_text()[-1500:]}"
    assert session.returncode == 143, output[-1500:]
    assert "SIGTERM: committed, leaving (exit 143)" in output


def test_a_restarted_container_keeps_its_host_key_and_the_pinned_login_still_works(run_worker, tmp_path):
    """The pod's host key lives on a pod-scoped volume (deploy/: an emptyDir at
    ELASTIC_HOST_KEY_DIR): the container that the kubelet starts again after an OOM kill or a
    failed check serves the key the daemon pinned, and strict host-key checking passes."""
    keys = tmp_path / "host-keys"
    keys.mkdir()
    pod = {"env": {"ELASTIC_HOST_KEY_DIR": "/run/elastic-horovod/host-keys"},
           "volumes": {str(keys): "/run/elastic-horovod/host-keys"}}
    first = run_worker(1, **pod)
    pinned = tmp_path / "known_hosts"
    scan = subprocess.run(["ssh-keyscan", "-t", "ed25519", "-p", str(first.port), first.ip], capture_output=True,
                          text=True, timeout=60)
    pinned.write_text(scan.stdout)
    assert pinned.read_text().strip(), scan.stderr
    first.stop(grace=10)
    again = run_worker(1, **pod)  # the same pod (address, volumes), a new container
    strict = again.ssh_argv()
    strict[strict.index("StrictHostKeyChecking=no")] = "StrictHostKeyChecking=yes"
    strict[strict.index("UserKnownHostsFile=/dev/null")] = f"UserKnownHostsFile={pinned}"
    login = subprocess.run(strict + ["true"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert login.returncode == 0, login.stderr
    again.stop(grace=10)
    # without the pod-scoped directory a restarted container makes a new key: the pin breaks
    bare = run_worker(1)
    old = pinned.read_text().split()[-1]
    assert host_key(bare) != old


def test_the_readiness_check_reads_the_configured_port(run_worker):
    w = run_worker(1)
    ready = subprocess.run(["podman", "exec", w.name, "/usr/local/bin/worker-entrypoint", "ready"],
                           capture_output=True, text=True, timeout=60)
    assert ready.returncode == 0, ready.stderr
    other = subprocess.run(["podman", "exec", "--env", "SSH_PORT=2299", w.name, "/usr/local/bin/worker-entrypoint",
                            "ready"], capture_output=True, text=True, timeout=60)
    assert other.returncode == 1


def host_key(w) -> str:
    out = subprocess.run(["ssh-keyscan", "-t", "ed25519", "-p", str(w.port), w.ip], capture_output=True,
                         text=True, timeout=60)
    lines = [ln for ln in out.stdout.splitlines() if ln and not ln.startswith("#")]
    assert lines, out.stderr
    return lines[0].split()[-1]


def test_each_container_makes_its_own_host_key_and_the_image_has_none(images, run_worker):
    a, b = run_worker(1), run_worker(2)
    assert host_key(a) != host_key(b)
    baked = subprocess.run(["podman", "run", "--rm", "--entrypoint", "/bin/sh", images[0], "-c",
                            "ls /etc/ssh/ | grep -c ssh_host_ || true"], capture_output=True, text=True, timeout=120)
    assert baked.stdout.strip() == "0", baked.stdout


def test_sshd_offers_only_publickey_and_accepts_the_job_key(run_worker, job_key):
    w = run_worker(1)
    transport = paramiko.Transport((w.ip, w.port))
    try:
        transport.start_client(timeout=30)
        with pytest.raises(paramiko.BadAuthenticationType) as refused:
            transport.auth_password("root", "root")
        assert refused.value.allowed_types == ["publickey"]
    finally:
        transport.close()
    # a foreign key is refused, the job key logs in
    other = job_key[0].parent / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True, timeout=60)
    foreign = subprocess.run(w.ssh_argv()[:2] + [str(other)] + w.ssh_argv()[3:] + ["true"], capture_output=True,
                             text=True, timeout=60)
    assert foreign.returncode == 255 and "Permission denied" in foreign.stderr
    ok = w.ssh("hostname; cat /proc/self/status")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[0] == "worker-t"
    status = dict(line.split(":\t", 1) for line in ok.stdout.splitlines()[1:] if ":\t" in line)
    # the session runs with no more than the three capabilities sshd needs, and cannot gain any
    bounding = int(status["CapBnd"].strip(), 16)
    assert bounding == (1 << 6) | (1 << 7) | (1 << 18), hex(bounding)  # SETGID, SETUID, SYS_CHROOT
    assert status["NoNewPrivs"].strip() == "1"


def test_sshd_refuses_forwarding(run_worker):
    w = run_worker(1)
    fwd = subprocess.run(w.ssh_argv("-o", "ExitOnForwardFailure=yes", "-L", "127.0.0.1:0:127.0.0.1:22") + ["true"],
                         capture_output=True, text=True, timeout=60)
    assert fwd.returncode != 0
    config = w.ssh("/usr/sbin/sshd -T")
    settings = dict(line.split(" ", 1) for line in config.stdout.splitlines() if " " in line)
    assert settings["x11forwarding"] == "no" and settings["allowtcpforwarding"] == "no"
    assert settings["passwordauthentication"] == "no" and settings["maxstartups"] == "100:30:200"


def test_a_pod_that_must_use_cuda_but_cannot_fails_at_start(run_worker):
    w = run_worker(1, env={"ELASTIC_REQUIRE_CUDA": "1"}, wait=False)
    code = w.proc.wait(timeout=300)
    assert code == 1
    lines = [ln for ln in w.log.read_text().splitlines() if ln.strip()]
    assert lines[-1].startswith("check-cuda: error: this pod was given GPUs but torch"), lines[-3:]


def test_without_the_public_key_the_entrypoint_exits_1_with_one_line(images, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    run = subprocess.run(["podman", "run", "--rm", "--network", "none",
                          "--volume", f"{empty}:/etc/elastic-horovod/ssh:ro", images[0]],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1
    assert run.stderr.strip() == ("worker-entrypoint: error: no public key at /etc/elastic-horovod/ssh/id_ed25519.pub "
                                  "(mount the job's SSH Secret)")
