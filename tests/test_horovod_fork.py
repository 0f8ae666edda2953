"""The Horovod fork as a folder of its own (docs/horovod-fork.md): the series is the one list of
what is applied, every prefix of it applies to the stock sdist, the version is written once,
the wheel key follows the patches' content and not their place, and every patch of the series
is named by a test. The scripts are run as a user runs them; none imports Horovod or torch."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORK = ROOT / "horovod-fork"
TOOLS = FORK / "tools"
SERIES = TOOLS / "horovod-series"
CHECK = TOOLS / "check-horovod-series"
DEADLINE = 300  # seconds for one script run; a check takes seconds, the first one downloads the sdist


def run(*argv: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=DEADLINE,
                          env={**os.environ, **(env or {})})


def series_names() -> list[str]:
    return [Path(line).name for line in run(SERIES).stdout.splitlines()]


def fork_copy(tmp_path: Path, names: list[str]) -> Path:
    """A fork folder with the given patches of ours, its series listing them in that order."""
    fork = tmp_path / "fork"
    (fork / "patches").mkdir(parents=True)
    for name in names:
        shutil.copy(FORK / "patches" / name, fork / "patches" / name)
    (fork / "series").write_text("# a test's series\n\n" + "".join(f"{n}\n" for n in names))
    return fork


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_the_series_lists_exactly_the_patches_in_the_folder():
    names = series_names()
    assert names == sorted(p.name for p in (FORK / "patches").glob("*.patch"))
    assert len(names) == len({n[:4] for n in names})  # one number, one patch


# where a patch may write in Horovod's tree: its Python, its C++ and the Gloo it vendors
SOURCE_PATH = re.compile(r"(horovod|third_party/gloo)/[\w/.-]+\.(py|cc|h|cpp|cu|txt|cmake)")


def test_every_patch_changes_only_source_files():
    """No patch carries a compiled file, a binary or a stray file outside the source: a patch
    once carried four .pyc files of the tree it was made in, and another a copy of a patch file
    at the tree's root (a format-patch written into the tree); both went into the wheel."""
    for name in series_names():
        text = (FORK / "patches" / name).read_text()
        paths = re.findall(r"^diff --git a/(\S+) b/", text, re.M)
        assert paths, name
        stray = [path for path in paths if not SOURCE_PATH.fullmatch(path) or "__pycache__" in path]
        assert not stray, f"{name} changes {stray}"
        assert "GIT binary patch" not in text, name


@pytest.mark.parametrize("damage,why", [
    ("missing", "which is not in"),
    ("unlisted", "is not listed in"),
    ("twice", "is listed twice"),
    ("bad name", "not a patch name"),
])
def test_a_series_that_does_not_match_its_folder_is_a_one_line_error(tmp_path, damage, why):
    names = series_names()[:3]
    fork = fork_copy(tmp_path, names)
    series = fork / "series"
    if damage == "missing":
        (fork / "patches" / names[1]).unlink()
    elif damage == "unlisted":
        series.write_text(f"{names[0]}\n{names[2]}\n")
    elif damage == "twice":
        series.write_text(series.read_text() + f"{names[0]}\n")
    else:
        series.write_text(series.read_text() + "../outside.patch\n")
    out = run(SERIES, fork)
    assert out.returncode == 1 and out.stdout == ""
    assert why in one_line(out.stderr)
    # the build refuses it the same way, before it downloads anything
    build = run(TOOLS / "build-horovod", tmp_path / "wheel", env={"HOROVOD_PATCHES": str(fork)})
    assert build.returncode == 1 and why in one_line(build.stderr)
    assert not (tmp_path / "wheel").exists()


def test_a_build_with_a_python_that_has_no_torch_is_a_one_line_error(tmp_path):
    """Horovod's torch extension builds against the interpreter's torch: one without it is
    named in one line, before anything is downloaded (it was a Python traceback)."""
    bare = tmp_path / "bare"
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(bare)], check=True, timeout=DEADLINE)
    build = run(TOOLS / "build-horovod", tmp_path / "wheel", env={"PYTHON": str(bare / "bin" / "python")})
    assert build.returncode == 1
    assert "cannot import torch" in one_line(build.stderr)
    assert not (tmp_path / "wheel").exists()


def test_a_prefix_of_the_series_ends_at_its_patch():
    names = series_names()
    out = run(SERIES, "--upto", names[3][:4])
    assert [Path(p).name for p in out.stdout.splitlines()] == names[:4]
    missing = run(SERIES, "--upto", "0100")  # the series is numbered from 0101
    assert missing.returncode == 1 and "no patch numbered 0100" in one_line(missing.stderr)


def test_the_version_is_written_once_in_the_version_patch(tmp_path):
    version = run(SERIES, "--version").stdout.strip()
    assert re.fullmatch(r"0\.28\.1\+eh\d+", version)
    setting = [n for n in series_names() if f"+__version__ = '{version}'" in (FORK / "patches" / n).read_text()]
    assert [n[:4] for n in setting] == ["0101"]
    assert not re.search(r"\beh\d+\b", (ROOT / "scripts" / "setup").read_text())
    # a series that sets it twice, or never, has no version
    names = series_names()
    never = run(SERIES, "--version", fork_copy(tmp_path / "a", names[1:4]))
    assert never.returncode == 1 and "exactly once" in one_line(never.stderr)


def _clone_for_key(where: Path) -> Path:
    """The files horovod-fork/tools/horovod-wheel-key reads (the fork folder with its tools, the
    set-up's pins), copied under where."""
    shutil.copytree(FORK, where / "horovod-fork")
    (where / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "setup", where / "scripts" / "setup")
    return where


def test_the_wheel_key_follows_the_patches_content_not_their_place(tmp_path):
    a = _clone_for_key(tmp_path / "a")
    b = _clone_for_key(tmp_path / "elsewhere" / "b")
    key = run(TOOLS / "horovod-wheel-key", "py311", "cpu").stdout.strip()
    assert key.startswith("horovod-" + run(SERIES, "--version").stdout.strip() + "-")
    assert run(a / "horovod-fork/tools/horovod-wheel-key", "py311", "cpu").stdout.strip() == key
    assert run(b / "horovod-fork/tools/horovod-wheel-key", "py311", "cpu").stdout.strip() == key
    patch = next((b / "horovod-fork" / "patches").glob("0102-*.patch"))
    patch.write_text(patch.read_text().replace("What:", "What (changed):", 1))
    assert run(b / "horovod-fork/tools/horovod-wheel-key", "py311", "cpu").stdout.strip() != key


def test_every_prefix_of_the_series_applies_to_the_stock_sdist():
    out = run(CHECK)
    assert out.returncode == 0, out.stderr
    assert f"every prefix of the {len(series_names())} patches applies" in out.stderr


def test_a_patch_that_does_not_apply_is_named_and_the_rest_still_tried(tmp_path):
    names = series_names()[:4]
    fork = fork_copy(tmp_path, names)
    broken = fork / "patches" / names[1]
    text = broken.read_text()
    # a context line of its first hunk that the stock file does not have
    head, hunks = text.split("\n@@", 1)
    context = next(line for line in hunks.splitlines()[1:] if line.startswith(" ") and len(line.strip()) > 10)
    broken.write_text(head + "\n@@" + hunks.replace(context + "\n", context + " # not in stock\n", 1))
    out = run(CHECK, fork)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith(f"check-horovod-series: {names[1]} does not apply after the patches before it: ")
    assert lines[1] == "check-horovod-series: 1 of the 4 patches do not apply to Horovod 0.28.1 (above)"


def _patch_tests() -> ModuleType:
    path = TOOLS / "horovod-patch-tests"
    loader = importlib.machinery.SourceFileLoader("horovod_patch_tests", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.parametrize("doc,claimed", [
    ("0108: a host whose worker", ["0108"]),
    ("Patch 0108: a host", ["0108"]),
    ("Patches 0103/0106: aborts", ["0103", "0106"]),
    ("0103/0109: in each round", ["0103", "0109"]),
    ("0103 and 0106: both", ["0103", "0106"]),
    ("0107 (with 0108): a world", ["0107"]),
    ("0105 (push discovery): a host", ["0105"]),
    ("0103/0105 (the Gloo abort): a worker", ["0103", "0105"]),
    ("\n    0109: indented", ["0109"]),
    ("A joiner (0107) dies", []),
    ("0107-0108 is a range, not a claim", []),
    ("12345: not a patch number", []),
])
def test_a_test_names_its_patches_at_the_start_of_its_docstring(doc, claimed):
    assert _patch_tests().claimed(doc) == claimed


def test_every_patch_of_the_series_is_named_by_a_test_and_the_table_is_current():
    out = run(TOOLS / "horovod-patch-tests", "--check")
    assert out.returncode == 0 and out.stderr == "", out.stderr


def test_the_patch_check_names_an_untested_patch_and_a_stale_table():
    module = _patch_tests()
    patches = series_names()
    found = module.patch_tests(ROOT / "tests")
    doc = (ROOT / "docs" / "horovod-fork.md").read_text()
    assert module.problems(patches, found, doc) == []
    untested = [*patches, "0099-a-fix-nobody-tests.patch"]
    bad = module.problems(untested, found, doc)
    assert bad[0] == ("patch 0099 (0099-a-fix-nobody-tests.patch) is named by no test: "
                      "start a test's docstring with '0099:'")
    assert any("out of date" in line for line in bad)  # the table lacks its row
    orphan = {**found, "0098": ["tests/x.py::test_y"]}
    assert module.problems(patches, orphan, doc)[0] == \
        "tests/x.py::test_y names patch 0098, which horovod-fork/series does not list"


def _recorded_rewrites() -> list[str]:
    return [line for line in (FORK / "rewrites").read_text().splitlines() if line and not line.startswith("#")]


def test_no_patch_changes_what_another_wrote_but_at_the_recorded_places(tmp_path):
    """The lines one patch of the series writes and a later one changes are exactly the places
    horovod-fork/rewrites records (tools/series_rewrites.py on a checkout of the series): a fix
    put into a patch that rewrites an earlier patch's code adds a place and fails here; a place
    the series no longer has must leave the record too."""
    checkout = tmp_path / "hvd"
    out = run(TOOLS / "horovod-fork-checkout", checkout)
    assert out.returncode == 0, out.stderr
    found = run(sys.executable, TOOLS / "series_rewrites.py", checkout)
    assert found.returncode == 0, found.stderr
    assert found.stdout.splitlines() == _recorded_rewrites()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@localhost"})


def test_same_code_tells_a_moved_docstring_or_import_from_a_change_of_code(tmp_path):
    """tools/same_code.py, the check that a change to the patches moved code and changed none:
    docstrings, comments, layout and the grouping of ``from`` imports may differ; a changed
    expression is code, and a file only on one side too."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    source = ('"""A module."""\nfrom os import path, sep\n\n\ndef f(a, b):\n    """Adds."""\n'
              '    return a + b  # sum\n')
    (repo / "m.py").write_text(source)
    _git(repo, "add", "m.py")
    _git(repo, "commit", "-q", "-m", "a")
    (repo / "m.py").write_text('"""The module, said otherwise."""\nfrom os import sep\nfrom os import path\n\n\n'
                               'def f(a,\n      b):\n    """Adds a and b."""\n    return (a +\n            b)\n')
    _git(repo, "commit", "-q", "-am", "layout")
    (repo / "m.py").write_text(source.replace("a + b", "b + a"))
    _git(repo, "commit", "-q", "-am", "code")
    (repo / "n.py").write_text(source)
    _git(repo, "add", "n.py")
    _git(repo, "commit", "-q", "-m", "new file")
    tool = TOOLS / "same_code.py"
    same = run(sys.executable, tool, repo, "HEAD~3", "HEAD~2")
    assert same.returncode == 0 and same.stdout == "m.py: the same code (docstrings, comments or layout differ)\n"
    changed = run(sys.executable, tool, repo, "HEAD~3", "HEAD~1")
    assert changed.returncode == 1 and changed.stdout == "m.py: the code differs\n"
    added = run(sys.executable, tool, repo, "HEAD~1", "HEAD")
    assert added.returncode == 1 and added.stdout == "n.py: only in HEAD\n"


def test_a_venv_set_up_from_a_wheel_directory_stays_on_it_until_told(tmp_path):
    """horovod-fork/tools/horovod-wheel-source, setup's choice of the wheel: ELASTIC_HOROVOD_WHEELS=DIR (stock
    Horovod, to see a test fail without the patches) is remembered by the venv, so the setup
    that scripts/test runs without the variable keeps it instead of putting the series' wheel
    back (the test would then run on the fork); =series returns to the series' wheel; a
    directory without a wheel is a one-line error that changes nothing."""
    tool = TOOLS / "horovod-wheel-source"
    venv, stock = tmp_path / "venv", tmp_path / "stock"
    venv.mkdir()
    stock.mkdir()
    (stock / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl").write_bytes(b"a wheel")

    def choice(wheels: str | None) -> str:
        env = {k: v for k, v in os.environ.items() if k != "ELASTIC_HOROVOD_WHEELS"}
        if wheels is not None:
            env["ELASTIC_HOROVOD_WHEELS"] = wheels
        out = subprocess.run([str(tool), str(venv)], capture_output=True, text=True, env=env, timeout=DEADLINE)
        assert out.returncode == 0 and out.stderr == "", out.stderr
        return out.stdout.strip()

    assert choice(None) == ""  # a new venv: the series' wheel
    assert choice(str(stock)) == str(stock)
    assert choice(None) == str(stock)  # scripts/test's setup keeps it
    bad = run(tool, venv, env={"ELASTIC_HOROVOD_WHEELS": str(tmp_path / "none")})
    assert bad.returncode == 1 and "no Horovod wheel" in one_line(bad.stderr)
    assert choice(None) == str(stock)  # unchanged by the bad one
    assert choice("series") == ""
    assert choice(None) == ""


def test_weave_edit_moves_a_line_between_patches_and_keeps_everything_else(tmp_path):
    """tools/weave_edit.py, the tool that takes a rewrite away: exported and applied unchanged,
    the commits are the same ones (ids and all); a weave edited so that a later patch adds a
    line instead of changing an earlier patch's gives that file at every commit, with the
    other files and the messages as they were; a bad weave is a one-line error, exit 2."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "f.py").write_text("a = 0\n")
    _git(repo, "add", "f.py")
    _git(repo, "commit", "-q", "-m", "stock")
    _git(repo, "tag", "stock")
    (repo / "f.py").write_text("a = 0\nb = 1\n")
    _git(repo, "commit", "-q", "-am", "one\n\nits message")
    (repo / "f.py").write_text("a = 0\nb = 2\n")
    (repo / "g.txt").write_text("other\n")
    _git(repo, "add", "g.txt")
    _git(repo, "commit", "-q", "-am", "two")
    tool = TOOLS / "weave_edit.py"
    tip = run("git", "-C", repo, "rev-parse", "HEAD").stdout.strip()
    exported = run(sys.executable, tool, "export", repo, "f.py")
    assert exported.returncode == 0, exported.stderr
    body = [line for line in exported.stdout.splitlines() if not line.startswith("#")]
    assert body == ["00-..|a = 0", "01-02|b = 1", "02-..|b = 2"]
    weave = tmp_path / "f.weave"
    weave.write_text(exported.stdout)
    assert run(sys.executable, tool, "apply", repo, "f.py", weave).returncode == 0
    assert run("git", "-C", repo, "rev-parse", "HEAD").stdout.strip() == tip

    weave.write_text("00-..|a = 0\n01-..|b = 1\n02-..|b += 1\n")
    applied = run(sys.executable, tool, "apply", repo, "f.py", weave)
    assert applied.returncode == 0, applied.stderr

    def show(rev: str) -> str:
        return run("git", "-C", repo, "show", rev).stdout

    assert show("HEAD~1:f.py") == "a = 0\nb = 1\n"
    assert show("HEAD:f.py") == "a = 0\nb = 1\nb += 1\n"
    assert show("HEAD:g.txt") == "other\n"
    assert run("git", "-C", repo, "log", "--format=%B", "-1", "HEAD~1").stdout.strip() == "one\n\nits message"
    assert run("git", "-C", repo, "rev-parse", "HEAD~2").stdout == run("git", "-C", repo, "rev-parse", "stock").stdout

    weave.write_text("00-..|a = 0\n03-..|b = 1\n")
    bad = run(sys.executable, tool, "apply", repo, "f.py", weave)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "weave line 2" in bad.stderr
