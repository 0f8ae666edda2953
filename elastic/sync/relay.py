"""Dataset relay, the pure part: when to relay, who copies to whom, and the scripts of a peer copy.

With relay, hosts that hold a verified copy serve it to the next hosts, so the copies form a
fan-out tree and N hosts take about log2(N+1) copy times instead of N (the launcher's link
carries the dataset once per round, not once per host). Every sender -- the launcher or a peer
-- copies to one host at a time, so ``--bwlimit`` is each sender's outgoing cap.

The channel (no private key on any worker). The launcher starts, over its own SSH connection
to the peer, ``serve_script``: an rsync daemon bound to the peer's pod address on a random
port, with one **read-only** module whose path is the peer's current verified version, one
user ``relay`` whose password is a per-run random secret (sent on the SSH session's stdin,
written to a 0600 file in a 0700 directory, never on a command line), ``hosts allow`` limited
to the run's hosts when they are IP addresses, and options that would follow symlinks out of
the module refused. The daemon lives as long as that SSH session: when the launcher closes the
session's stdin, or the connection drops, the script kills it and removes the directory.
The child pulls with ``pull_script``, also over the launcher's SSH session to the child, the
secret again on stdin, into its staging directory; then the ordinary verify-and-commit step
checks the copy against the launcher's manifest and publishes it atomically.

Threat model: a worker learns only a secret that opens a read-only copy of this run's dataset
for this run's duration, which it already receives; no key that opens a shell anywhere. A
peer that serves a corrupt or incomplete copy (disk fault, tampering, deleted mid-copy) costs
its child one attempt: verification refuses it and the child is retried from another source
(in the pipeline a peer's chunk that fails its check costs the receiver nothing: the peer is
struck off).
Not covered: a hostile peer can make its children fail (not serve wrong data: the digest comes
from the launcher); the rsync daemon protocol is not encrypted (the pod network carries the
dataset in the clear, as the cluster's own traffic would; the secret itself goes as a
challenge-response, not in the clear).
"""
from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from elastic.errors import ConfigError, SyncError
from elastic.sync.manifest import MANIFEST_NAME
from elastic.sync.remote import Layout
from elastic.sync.rsync import RsyncOptions, copy_flags, daemon_module_settings

LAUNCHER = "launcher"          # the sender that holds SRC (where dataset-sync runs)
RELAY_MODES = ("auto", "on", "off", "pipeline")
AUTO_MIN_HOSTS = 4             # auto: the pipeline when more hosts than this (or when peers are given)
RELAY_USER = "relay"
MODULE = "dataset"


def choose_path(mode: str, hosts: int, peers: int = 0, transport: str = "auto") -> str:
    """Pure: how a run serves its hosts, the one place of the ``--relay`` rule: ``"parallel"``
    (every host from the launcher at once, ``elastic.sync.service``), ``"relay"`` (whole copies
    down a tree) or ``"pipeline"`` (chunk by chunk, ``elastic.sync.pipeline``). ``auto`` takes
    the pipeline above ``AUTO_MIN_HOSTS`` hosts, or whenever peers that may already hold the
    dataset are given (a late joiner pulls from them, not the launcher), and the parallel copy
    otherwise or with ``--transport sftp`` (no host relays without rsync); ``on`` is the relay,
    ``off`` the parallel copy. A host without rsync in a relay or pipeline is copied on its own
    by SFTP from the launcher, as on the parallel path (``elastic.sync.transport``).
    ``ConfigError`` for an unknown mode, or ``on``/``pipeline`` with ``--transport sftp``."""
    if mode not in RELAY_MODES:
        raise ConfigError(f"--relay must be one of {', '.join(RELAY_MODES)}, got {mode!r}")
    if transport == "sftp" and mode in ("on", "pipeline"):
        raise ConfigError(f"--relay {mode} needs rsync on the hosts; not with --transport sftp")
    if mode == "auto":
        return "pipeline" if transport != "sftp" and (hosts > AUTO_MIN_HOSTS or peers > 0) else "parallel"
    return {"on": "relay", "off": "parallel"}.get(mode, mode)


class RelaySchedule:
    """Who copies to whom, as a relay run goes: the scheduler's whole state, pure (no threads,
    no I/O); ``elastic.sync.relay_run`` drives it from its one scheduling thread.

    Senders are the launcher, the peers that hold the dataset (``senders``) and every host
    once its copy succeeded. ``next_pairs()`` starts as many copies as there are free senders
    and pending hosts (``assign``: peers first, never a sender that failed that host); each
    started copy must be reported once, ``succeeded(host, sender)`` (both become free senders)
    or ``failed(host, sender, dead=..., retry=...)`` (``dead``: the sender serves no one any
    more; ``retry``: the host is pending again, else it is given up). With equal copy times
    the holders double each round: 16 hosts take 5 copy times from the launcher alone.
    """

    def __init__(self, hosts: Sequence[str], senders: Sequence[str] = (LAUNCHER,)) -> None:
        self.pending: list[str] = list(hosts)
        self.free: list[str] = list(senders)
        self.dead: set[str] = set()
        self.refused: dict[str, set[str]] = {}
        self.attempts: dict[str, int] = {h: 0 for h in hosts}
        self.running = 0

    @property
    def finished(self) -> bool:
        return not self.pending and not self.running

    def next_pairs(self) -> list[tuple[str, str]]:
        """The copies to start now, ``(sender, host)``; counted as running and attempted. When
        nothing runs and nothing can start (every live sender failed the pending hosts), the
        refusals are forgotten so the launcher tries them again."""
        pairs = assign(self.free, self.pending, self.refused)
        if not pairs and not self.running and self.pending:
            self.refused = {}
            pairs = assign(self.free, self.pending, self.refused)
            if not pairs:
                raise AssertionError("relay scheduler: nothing running and no free launcher")
        for sender, host in pairs:
            self.free.remove(sender)
            self.pending.remove(host)
            self.attempts[host] += 1
            self.running += 1
        return pairs

    def succeeded(self, host: str, sender: str) -> None:
        self.running -= 1
        self.free.append(host)
        if sender not in self.dead:
            self.free.append(sender)

    def failed(self, host: str, sender: str, *, dead: bool = False, retry: bool = True) -> None:
        self.running -= 1
        if sender != LAUNCHER:
            if dead:
                self.dead.add(sender)
            self.refused.setdefault(host, set()).add(sender)
        if sender not in self.dead:
            self.free.append(sender)
        if retry:
            self.pending.append(host)

    def give_up_pending(self) -> list[str]:
        """Cancelled: the hosts not started yet, removed from the schedule."""
        given, self.pending = self.pending, []
        return given


def assign(free: Sequence[str], pending: Sequence[str], refused: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Pure: pair free senders with pending hosts, in order, one host per sender, never a sender
    that ``refused[host]`` names (it failed that host before). Peers come before the launcher, so
    the launcher's link is used only when no peer is free."""
    senders = [s for s in free if s != LAUNCHER] + [s for s in free if s == LAUNCHER]
    pairs: list[tuple[str, str]] = []
    used: set[str] = set()
    for host in pending:
        for s in senders:
            if s not in used and s not in refused.get(host, ()):
                pairs.append((s, host))
                used.add(s)
                break
    return pairs


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


@dataclass(frozen=True)
class PeerSource:
    """Where a child pulls from: the peer's address, its daemon's port and the run's secret."""

    host: str
    port: int
    secret: str

    def url(self) -> str:
        return f"rsync://{RELAY_USER}@{self.host}:{self.port}/{MODULE}/"


def serve_script(layout: Layout, digest: str, address: str, port: int, allow: Iterable[str],
                 bwlimit_kbps: int | None, remote_rsync: str = "rsync", *, directory: str = "") -> str:
    """Script run on a peer over the launcher's SSH session: serve the peer's current version
    (only if its manifest has ``digest``) read-only over an rsync daemon on ``address:port``;
    with ``directory`` (a pipelined run's served directory, see ``elastic.sync.pipeline_run``)
    that directory instead, which the run fills chunk by chunk under the host's lock.

    Reads the secret as the first line of stdin; prints ``relay=ready`` once the daemon accepts
    connections, ``relay=busy`` when the port is taken, or ``error=...``; then keeps the daemon
    until stdin ends (the launcher closes it, or the connection drops) and cleans up."""
    q = shlex.quote
    allowed = " ".join(a for a in allow if is_ip(a))
    prefix = f"{layout.state_name}/"
    limit = f" --bwlimit={int(bwlimit_kbps)}" if bwlimit_kbps else ""
    module = "\n".join(daemon_module_settings())
    if directory:
        served = f"""served={q(directory)}
[ -d "$served" ] && [ ! -L "$served" ] || {{ echo "error=no served directory $served"; exit 0; }}
"""
    else:
        served = f"""target=$(readlink -- "$dest" 2>/dev/null) || {{ echo "error=no dataset at $dest"; exit 0; }}
case "$target" in
  {q(prefix)}v-*) ver=${{target#{q(prefix)}}} ;;
  *) echo "error=$dest is not managed by dataset-sync"; exit 0 ;;
esac
got=$(sed -n 's/^ *"digest": *"\\([0-9a-f]*\\)",*$/\\1/p' "$state/$ver/{MANIFEST_NAME}" 2>/dev/null | head -n 1)
[ "$got" = {q(digest)} ] || {{ echo "error=the copy at $dest is another dataset version"; exit 0; }}
served=$state/$ver
"""
    return f"""
state={q(layout.state)}; dest={q(layout.dest)}
{served}command -v {q(remote_rsync)} >/dev/null 2>&1 || {{ echo "error=no {remote_rsync} on the peer"; exit 0; }}
umask 077
dir=$(mktemp -d "$state/relay.XXXXXX") || {{ echo "error=cannot create a relay directory"; exit 0; }}
pid=
cleanup() {{ [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf -- "$dir"; }}
trap cleanup EXIT
trap 'exit 0' HUP INT TERM PIPE
IFS= read -r secret || {{ echo "error=no secret on stdin"; exit 0; }}
printf '%s:%s\\n' {RELAY_USER} "$secret" > "$dir/secrets"
cat > "$dir/rsyncd.conf" <<EOF
use chroot = no
uid = $(id -u)
gid = $(id -g)
log file = $dir/log
[{MODULE}]
path = $served
read only = yes
list = no
auth users = {RELAY_USER}
secrets file = $dir/secrets
strict modes = yes
{f"hosts allow = {allowed}" if allowed else ""}
{module}
EOF
{q(remote_rsync)} --daemon --no-detach --config="$dir/rsyncd.conf" --address={q(address)} --port={int(port)}{limit} &
pid=$!
i=0
while :; do
  if ! kill -0 "$pid" 2>/dev/null; then
    if grep -q "in use" "$dir/log" 2>/dev/null; then
      echo relay=busy
    else
      echo "error=rsync daemon did not start: $(tail -n 1 "$dir/log" 2>/dev/null)"
    fi
    pid=; exit 0
  fi
  if {q(remote_rsync)} --contimeout=5 "rsync://{address}:{int(port)}/" >/dev/null 2>&1; then break; fi
  i=$((i + 1)); [ "$i" -lt 100 ] || {{ echo "error=rsync daemon not answering"; exit 0; }}
  sleep 0.1
done
echo relay=ready
cat >/dev/null
"""


def pull_script(layout: Layout, source: PeerSource, current: str, options: RsyncOptions, *, address: str = "",
                checksum: bool = False) -> str:
    """Script run on a child over the launcher's SSH session: pull ``source`` into staging (the
    secret is the first line of stdin) with ``rsync.copy_flags`` for a copy, the push's flags
    but for what a verified copy needs (``rsync.link_flag``). Prints rsync's progress and
    statistics like a push.
    Like a push's remote rsync it holds ``<state>/writer`` open (a shared ``flock`` on fd 8), so
    a later sync ends it before touching staging if this run died (``end_stale_writers_script``).
    ``address``: the child's own IP, the connection's source (the peer's ``hosts allow``)."""
    q = shlex.quote
    opts = [*copy_flags(options, current, checksum=checksum, from_copy=True), "--contimeout=10"]
    if address and is_ip(address):
        opts.append(f"--address={address}")
    remote_rsync = options.remote_rsync
    return f"""
umask 077
exec 8>>{q(layout.writer)} && flock -s 8 || exit 3
pw=$(mktemp) || exit 3
trap 'rm -f -- "$pw"' EXIT
IFS= read -r secret || exit 3
printf '%s\\n' "$secret" > "$pw"
{q(remote_rsync)} {' '.join(q(o) for o in opts)} --password-file="$pw" -- {q(source.url())} {q(layout.staging + '/')}
"""


def parse_serve(line: str) -> str:
    """The first status line of ``serve_script`` -> ``ready`` | ``busy``; ``SyncError`` otherwise."""
    key, _, value = line.strip().partition("=")
    if key == "relay" and value in ("ready", "busy"):
        return value
    if key == "error":
        raise SyncError(value)
    raise SyncError(f"unexpected answer from the relay script: {line.strip()[:200]!r}")
