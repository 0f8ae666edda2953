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
    assert "forwarding SIGTERM to the job's processes" in w.log.read_text()


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
