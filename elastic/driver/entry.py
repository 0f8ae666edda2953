"""``python -m elastic.driver.entry [--launcher project|horovod] [--python PY] BIN``: make
``BIN/horovodrun`` run the project's driver, or Horovod's own launcher.

``project`` (the default): ``horovodrun`` runs ``elastic.driver.hvdrun:main`` (Horovod's
launcher with the project's ``ElasticDriver``). ``horovod``: it runs Horovod's own
``horovod.runner.launch:run_commandline``, what Horovod's wheel installs as ``horovodrun``
(a venv on another Horovod wheel than the series', ``ELASTIC_HOROVOD_WHEELS``: the project's
driver subclasses the whole series' driver). Horovod's own launcher is always
``horovodrun-horovod`` too (``pyproject.toml``'s ``[project.scripts]``).

Why a file written after every install, not a ``horovodrun`` console script of the project:
the name belongs to Horovod's wheel, and pip lets the last install win without a word. Setup
reinstalls Horovod into an existing venv whenever its wheel changes, which puts Horovod's
script back; uninstalling either distribution deletes the other's; and when the image
installs both wheels in one pip command, pip's order decides. ``scripts/setup`` (every run)
and ``images/Dockerfile`` (after installing both) call this instead.

The script is a console-script wrapper whose first line is ``#!PY`` (default: this
interpreter): ``PY`` must be the interpreter of the environment the script runs in. It is
written only when its content differs (temporary file and rename, mode 0755); prints what it
changed, nothing when nothing did. Exit 0; a ``BIN`` that is not a directory or a relative
``--python``: one ``error:`` line, exit 2.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from elastic.errors import ConfigError
from shared.argparser import OneLineParser
from shared.atomicfile import write_atomic
from shared.exitcodes import EXIT_OK
from shared.runner import run_main

COMMAND = "horovodrun"
# launcher -> (module, function, what it is)
LAUNCHERS = {
    "project": ("elastic.driver.hvdrun", "main", "Horovod's launcher with the project's elastic driver"),
    "horovod": ("horovod.runner.launch", "run_commandline", "Horovod's own launcher"),
}


def script(launcher: str, python: str) -> str:
    """The text of ``horovodrun`` running ``launcher`` (a key of ``LAUNCHERS``) with ``python``."""
    module, function, what = LAUNCHERS[launcher]
    return (f"#!{python}\n"
            f"# {COMMAND}: {what} (written by elastic.driver.entry; Horovod's own is {COMMAND}-horovod)\n"
            "import sys\n"
            f"from {module} import {function}\n"
            "if __name__ == '__main__':\n"
            f"    sys.exit({function}())\n")


def install(bin_dir: str, launcher: str = "project", python: str | None = None) -> bool:
    """Make ``bin_dir/horovodrun`` run ``launcher``; True when the file changed."""
    if not os.path.isdir(bin_dir):
        raise ConfigError(f"{bin_dir}: not a directory")
    python = sys.executable if python is None else python
    if not os.path.isabs(python):
        raise ConfigError(f"--python {python}: not an absolute path")
    path = os.path.join(bin_dir, COMMAND)
    text = script(launcher, python)
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text and os.access(path, os.X_OK):
                return False
    except (OSError, UnicodeDecodeError):
        pass
    write_atomic(path, text, mode=0o755)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m elastic.driver.entry",
                           description="Make BIN/horovodrun run the project's driver, or Horovod's own launcher.")
    parser.add_argument("bin", metavar="BIN", help="the environment's bin directory")
    parser.add_argument("--launcher", choices=sorted(LAUNCHERS), default="project",
                        help="project: elastic.driver.hvdrun:main (default); horovod: Horovod's own")
    parser.add_argument("--python", help="the interpreter in the script's #! line (default: this one)")
    args = parser.parse_args(argv)

    def body() -> int:
        if install(args.bin, args.launcher, args.python):
            print(f"{os.path.join(args.bin, COMMAND)}: {LAUNCHERS[args.launcher][2]}", file=sys.stderr)
        return EXIT_OK

    return run_main("entry", body, usage=ConfigError, failure=ConfigError)


if __name__ == "__main__":
    sys.exit(main())
