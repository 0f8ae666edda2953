"""images/job-processes: which of a worker container's processes get the pod's SIGTERM.

The rule is a pure function (``classify``) over a process table, tested here with the trees a
worker shows: a rank started by horovodrun over ssh with a forkserver DataLoader, OpenSSH
9.8+'s ``sshd-session``, an orphaned loader. The container tests (test_worker_container.py)
run it for real under the image's entrypoint."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys

import pytest

from tests.images.conftest import ROOT

SCRIPT = ROOT / "images" / "job-processes"


def load():
    loader = importlib.machinery.SourceFileLoader("job_processes", str(SCRIPT))
    spec = importlib.util.spec_from_loader("job_processes", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


jp = load()
ENTRY = 7

# pid: (ppid, state, comm)
BASE = {1: (0, "S", "tini"), ENTRY: (1, "S", "worker-entrypoi"), 8: (ENTRY, "S", "sshd"),
        9: (ENTRY, "S", "sleep")}


def table(**extra):
    t = dict(BASE)
    t.update({int(k[1:]): v for k, v in extra.items()})
    return t


@pytest.mark.parametrize("session", ["sshd", "sshd-session"])
def test_a_rank_with_a_forkserver_loader_has_one_trainer(session):
    t = table(p20=(8, "S", session), p21=(20, "S", session), p22=(21, "S", "bash"), p23=(22, "S", "python"),
              p24=(23, "S", "python3"), p25=(24, "S", "pt_data_worker"), p26=(24, "S", "pt_data_worker"),
              p27=(23, "Z", "python"))
    assert jp.classify(t, ENTRY) == {22: "other", 23: "trainer", 24: "other", 25: "other", 26: "other"}


def test_a_rank_execd_by_the_shell_and_a_chain_of_shells():
    t = table(p20=(8, "S", "sshd"), p30=(20, "S", "python"), p40=(20, "S", "sh"), p41=(40, "S", "bash"),
              p42=(41, "S", "rsync"))
    assert jp.classify(t, ENTRY) == {30: "trainer", 40: "other", 41: "other", 42: "trainer"}


def test_an_orphan_is_a_trainer_and_the_entrypoint_its_children_and_the_caller_are_left_out():
    t = table(p50=(1, "S", "pt_data_worker"), p60=(ENTRY, "S", "sh"), p61=(60, "R", "python"))
    assert jp.classify(t, ENTRY, own=frozenset({60, 61})) == {50: "trainer"}


def test_a_parent_loop_in_a_racy_table_ends():
    t = table(p70=(71, "S", "bash"), p71=(70, "S", "bash"))
    assert jp.classify(t, ENTRY) == {70: "other", 71: "other"}


def test_the_real_proc_table_parses(tmp_path):
    me = jp.read_table()
    import os

    assert me[os.getpid()][0] == os.getppid()


def test_bad_usage_is_one_line_and_exit_2():
    proc = subprocess.run([sys.executable, str(SCRIPT), "stop"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--entrypoint" in proc.stderr
