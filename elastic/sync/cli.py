"""``dataset-sync SRC DEST``: copy a dataset to every host, in parallel, verified, atomically.

    dataset-sync SRC DEST [--hosts h1,h2 | --hosts-file F | --host H] [--ssh-config FILE] [--jobs N]
                 [--allowed-root DIR]... [--transport auto|rsync|sftp] [--retries N] [--retry-delay S]
                 [--verify-unchanged quick|checksum] [--no-hash-cache] [--bwlimit KBPS] [--report FILE]
                 [--symlinks refuse|copy-unsafe|keep] [--relay auto|on|off|pipeline] [--chunk-mib M]
                 [--peers h1,h2 | --peers-file F]

Without a host flag the hosts are those ``discover-hosts`` prints.  Progress goes to stderr
(one refreshing line on a terminal, plain lines otherwise), the per-host table to stdout;
``--report FILE`` also writes the result as JSON.  Exit codes: 0 every host has the dataset,
1 some host failed (the table says which), 2 bad input or a refusal (DEST ``/`` or outside the
allowed roots, shell syntax in a name, a symlink leaving SRC without --symlinks), 128+N
interrupted by signal N (SIGINT 130, SIGTERM 143; DEST keeps its previous copy everywhere).

Relay (``elastic.sync.relay``, the rule in ``relay.choose_path``): hosts that hold verified data
serve it to the next ones over a read-only, per-run rsync daemon the launcher starts on them
over SSH. ``pipeline`` (``elastic.sync.pipeline``) relays chunk by chunk (about 8*log2(N)
chunks of at least ``--chunk-mib``): a host serves each verified chunk while it receives the
next, so N hosts take about one copy time plus log2(N) chunk times; peers (``--peers`` or
``--peers-file``: hosts outside this run that may already hold the dataset, e.g. the job's other
hosts when a late joiner is prepared) serve every chunk from the start. ``on`` relays whole
copies (about log2(N+1) copy times), ``off`` copies from the launcher to every host at once.
``auto`` (the default) takes the pipeline above 4 hosts or when peers are given, else the
parallel copy (and always with ``--transport sftp``); in a relay or pipeline a host without
rsync is copied by SFTP from the launcher, as on the parallel path. The summary line names the
path taken (the JSON report's ``path``); the table's SOURCE column says who served each host.

Environment: ELASTIC_SSH_CONFIG (--ssh-config), ELASTIC_SYNC_JOBS, ELASTIC_SYNC_ALLOWED_ROOTS
(colon-separated), ELASTIC_SYNC_TRANSPORT, ELASTIC_REMOTE_RSYNC, ELASTIC_SYNC_RETRIES,
ELASTIC_SYNC_VERIFY, ELASTIC_SYNC_SYMLINKS, ELASTIC_SYNC_RELAY, ELASTIC_HOSTS, ELASTIC_HOSTS_FILE,
DISCOVER_HOSTS_CMD.  Python API: ``elastic.sync.service``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from elastic.common.cli import env_default, env_int, hosts_from_args, setup_logging
from elastic.environment import (
    DISCOVER_HOSTS_CMD,
    ELASTIC_HOSTS,
    ELASTIC_HOSTS_FILE,
    ELASTIC_REMOTE_RSYNC,
    ELASTIC_SYNC_ALLOWED_ROOTS,
    ELASTIC_SYNC_JOBS,
    ELASTIC_SYNC_LOCK_TIMEOUT,
    ELASTIC_SYNC_RELAY,
    ELASTIC_SYNC_RETRIES,
    ELASTIC_SYNC_SYMLINKS,
    ELASTIC_SYNC_TRANSPORT,
    ELASTIC_SYNC_VERIFY,
)
from elastic.errors import ConfigError, ElasticError
from elastic.ssh.config import SSH_CONFIG_ENV
from elastic.sync.cancel import CancelToken
from elastic.sync.manifest import SYMLINK_MODES
from elastic.sync.retry import RetryPolicy
from elastic.sync.safety import DEFAULT_ALLOWED_ROOTS, check_dest, check_source, normalize_root, parse_allowed_roots
from shared.argparser import OneLineParser
from shared.atomicfile import write_atomic
from shared.exitcodes import EXIT_FAILURE, EXIT_OK, exit_for_signal
from shared.runner import run_main


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="dataset-sync", description=__doc__.split("\n\n")[0].replace("``", ""))
    parser.add_argument("src", metavar="SRC", help="local dataset directory")
    parser.add_argument("dest", metavar="DEST", help="directory on every host, inside an allowed root")
    parser.add_argument("--hosts", default=env_default(ELASTIC_HOSTS), help="h1,h2,... [ELASTIC_HOSTS]")
    parser.add_argument("--hosts-file", default=env_default(ELASTIC_HOSTS_FILE),
                        help="file of host[:slots] lines [ELASTIC_HOSTS_FILE]")
    parser.add_argument("--host", help="a single host (the discovery daemon's --prepare-cmd form)")
    parser.add_argument("--discover-cmd", default=env_default(DISCOVER_HOSTS_CMD, "discover-hosts"),
                        help="command printing host:slots lines when no host flag is given (default %(default)s)")
    parser.add_argument("--ssh-config", default=env_default(SSH_CONFIG_ENV),
                        help=f"ssh_config from ssh-bootstrap hosts [{SSH_CONFIG_ENV}]")
    parser.add_argument("--jobs", type=int, default=None, help="hosts copied at once (default 8) [ELASTIC_SYNC_JOBS]")
    parser.add_argument("--allowed-root", action="append", default=None,
                        help="DEST must be inside this directory; repeatable (default /data) "
                             "[ELASTIC_SYNC_ALLOWED_ROOTS]")
    parser.add_argument("--transport", default=env_default(ELASTIC_SYNC_TRANSPORT, "auto"),
                        choices=("auto", "rsync", "sftp"),
                        help="auto: rsync where the host has it, else SFTP (default %(default)s) "
                             "[ELASTIC_SYNC_TRANSPORT]")
    parser.add_argument("--remote-rsync", default=env_default(ELASTIC_REMOTE_RSYNC, "rsync"),
                        help="rsync command on the hosts (default %(default)s) [ELASTIC_REMOTE_RSYNC]")
    parser.add_argument("--retries", type=int, default=None,
                        help="attempts per host (default 3) [ELASTIC_SYNC_RETRIES]")
    parser.add_argument("--retry-delay", type=float, default=1.0, help="first backoff in seconds, doubling (default 1)")
    parser.add_argument("--verify-unchanged", default=env_default(ELASTIC_SYNC_VERIFY, "quick"),
                        choices=("quick", "checksum"),
                        help="how to check a host that already has this dataset: quick (paths, sizes, mtimes; "
                             "the content was checksummed when copied) or checksum (default %(default)s) "
                             "[ELASTIC_SYNC_VERIFY]")
    parser.add_argument("--no-hash-cache", action="store_true",
                        help="hash every SRC file even if unchanged since the last run (cache: "
                             "$XDG_CACHE_HOME/elastic-horovod/dataset-sync)")
    parser.add_argument("--bwlimit", type=int, default=None, help="rsync bandwidth limit per host, KiB/s")
    parser.add_argument("--connect-timeout", type=int, default=10, help="SSH connect timeout, seconds (default 10)")
    parser.add_argument("--lock-timeout", type=float, default=None,
                        help="seconds to wait for another dataset-sync to the same DEST on a host "
                             "(default 600) [ELASTIC_SYNC_LOCK_TIMEOUT]")
    parser.add_argument("--symlinks", default=env_default(ELASTIC_SYNC_SYMLINKS, "refuse"),
                        choices=SYMLINK_MODES,
                        help="symlinks pointing out of SRC: refuse them (default), copy-unsafe: copy their "
                             "target's content (rsync --copy-unsafe-links), keep: keep every link as a link "
                             "(rsync --links); links inside SRC stay links [ELASTIC_SYNC_SYMLINKS]")
    parser.add_argument("--relay", default=env_default(ELASTIC_SYNC_RELAY, "auto"),
                        choices=("auto", "on", "off", "pipeline"),
                        help="pipeline: hosts serve each verified chunk at once (~1 copy time + log2 N chunk "
                             "times); on: whole copies down a tree; off: every host from the launcher; auto: the "
                             "pipeline above 4 hosts or with peers, else off (off with --transport sftp); a host "
                             "without rsync gets SFTP from the launcher (default %(default)s) [ELASTIC_SYNC_RELAY]")
    parser.add_argument("--chunk-mib", type=float, default=8.0,
                        help="--relay pipeline: the smallest chunk, MiB (default %(default)g)")
    peers = parser.add_mutually_exclusive_group()
    peers.add_argument("--peers", default=None, help="h1,h2,...: hosts that may already hold the dataset and serve it")
    peers.add_argument("--peers-file", default=None, help="file of host[:slots] lines: peers, as --peers")
    parser.add_argument("--report", help="also write the result as JSON to this file")
    parser.add_argument("--progress-interval", type=float, default=1.0, help="seconds between progress reports")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    return parser


def _options(ns: argparse.Namespace):
    from elastic.sync.service import SyncOptions

    env_roots = env_default(ELASTIC_SYNC_ALLOWED_ROOTS)
    if ns.allowed_root:
        roots = tuple(normalize_root(r) for r in ns.allowed_root)
    elif env_roots:
        roots = parse_allowed_roots(env_roots)
    else:
        roots = DEFAULT_ALLOWED_ROOTS
    retries = ns.retries if ns.retries is not None else env_int(ELASTIC_SYNC_RETRIES, 3)
    if retries < 1:
        raise ConfigError(f"--retries must be >= 1, got {retries}")
    if ns.retry_delay < 0:
        raise ConfigError(f"--retry-delay must be >= 0, got {ns.retry_delay}")
    lock_timeout = ns.lock_timeout
    if lock_timeout is None:
        raw = os.environ.get(ELASTIC_SYNC_LOCK_TIMEOUT, "600")
        try:
            lock_timeout = float(raw)
        except ValueError:
            raise ConfigError(f"ELASTIC_SYNC_LOCK_TIMEOUT must be a number of seconds, got {raw!r}") from None
    if ns.ssh_config:
        try:
            open(ns.ssh_config).close()
        except OSError as exc:
            raise ConfigError(f"cannot read ssh_config {ns.ssh_config}: {exc.strerror}") from exc
    return SyncOptions(ssh_config=ns.ssh_config,
                       jobs=ns.jobs if ns.jobs is not None else env_int(ELASTIC_SYNC_JOBS, 8),
                       allowed_roots=roots, transport=ns.transport, remote_rsync=ns.remote_rsync,
                       retry=RetryPolicy(attempts=retries, base=ns.retry_delay), bwlimit_kbps=ns.bwlimit,
                       connect_timeout=ns.connect_timeout, verify_unchanged=ns.verify_unchanged,
                       hash_cache=not ns.no_hash_cache, lock_timeout=lock_timeout,
                       symlinks=ns.symlinks, chunk_mib=ns.chunk_mib)


def _run(ns: argparse.Namespace) -> int:
    from elastic.common.hostlist import parse_host_list, parse_hosts_file
    from elastic.common.hostsource import discover_hosts
    from elastic.sync.progress import ProgressReporter
    from elastic.sync.relay_run import distribute
    from elastic.sync.service import render_report

    options = _options(ns)
    # Refusals of DEST/SRC come before host discovery, so a bad call fails fast and alone.
    check_dest(ns.dest, options.allowed_roots)
    check_source(ns.src)
    hosts = hosts_from_args(ns.hosts, ns.hosts_file, ns.host, lambda: discover_hosts(ns.discover_cmd))
    peers: list[str] = []
    if ns.peers:
        peers = [h.name for h in parse_host_list(ns.peers)]
    elif ns.peers_file:
        try:
            text = open(ns.peers_file).read()
        except FileNotFoundError:
            text = ""  # no other host pinned yet: nobody to pull from
        except OSError as exc:
            raise ConfigError(f"cannot read peers file {ns.peers_file}: {exc.strerror}") from exc
        peers = [h.name for h in parse_hosts_file(text)]

    cancel = CancelToken()
    interrupted = []

    def on_signal(signum, _frame):
        interrupted.append(signum)
        cancel.cancel()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    reporters = []

    def attach(board):
        reporter = ProgressReporter(board, sys.stderr, ns.progress_interval)
        reporter.start()
        reporters.append(reporter)

    try:
        report = distribute(ns.src, ns.dest, hosts, options, relay=ns.relay, peers=peers, cancel=cancel,
                            board_hook=attach)
    finally:
        for reporter in reporters:
            reporter.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print(render_report(report))
    total_sent = sum(h.bytes_sent for h in report.hosts)
    print(f"{len(report.hosts) - len(report.failed)}/{len(report.hosts)} hosts ok; {report.files} files, "
          f"{report.total_bytes} bytes in the dataset; {total_sent} bytes sent; {report.seconds:.2f}s; "
          f"path: {report.path} (--relay {ns.relay})")
    if ns.report:
        try:
            write_atomic(ns.report, report.to_json())
        except OSError as exc:
            raise ConfigError(f"cannot write report {ns.report}: {exc.strerror}") from exc
    if interrupted:
        print("error: dataset-sync interrupted; DEST keeps its previous copy", file=sys.stderr)
        return exit_for_signal(interrupted[0])
    if not report.ok:
        print(f"error: {len(report.failed)} of {len(report.hosts)} hosts failed: {', '.join(report.failed)}",
              file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``dataset-sync``; returns the exit code."""
    ns = _parser().parse_args(argv)
    setup_logging(ns.verbose)
    return run_main("dataset-sync", lambda: _run(ns), usage=ConfigError, failure=ElasticError)


if __name__ == "__main__":
    sys.exit(main())
