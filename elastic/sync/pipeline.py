"""Pipelined relay, the pure part: the dataset cut into chunks, and who copies which chunk to whom.

Today's relay (``elastic.sync.relay``) hands whole copies down a tree: a host serves only once
its copy is complete, so N hosts take about log2(N+1) copy times. The pipeline serves chunk by
chunk: a host that holds one verified chunk serves it while it receives the next, so the
launcher's link is busy from the first second to the last and the copies fan out behind it,
about one copy time plus log2(N) chunk times in all.

``chunk_plan`` cuts a manifest into chunks of about equal bytes (whole files per chunk);
``ChunkSchedule`` decides, whenever a transfer ends, which transfers start next. Both are pure
(no I/O, no clock); ``elastic.sync.pipeline_run`` executes the schedule.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from elastic.errors import ConfigError
from elastic.sync.relay import LAUNCHER

MAX_CHUNKS = 64
CHUNKS_PER_ROUND = 8            # about this many chunks per doubling of the holders
DEFAULT_CHUNK_MIB = 8
REFUSED_EXITS = frozenset({5, 10, 12, 35})
"""rsync exit codes of a pull that never reached the sender's data (start-up refused, socket
I/O, protocol stream, daemon connection timeout): the sender's fault, not the receiver's."""
STRIKES = 2                     # a sender that failed this many different hosts in a row stops serving


def chunk_count(total_bytes: int, hosts: int, chunk_bytes: int) -> int:
    """Pure: how many chunks: about ``8*log2(hosts)``, at most ``MAX_CHUNKS``, each at least
    ``chunk_bytes`` (so a small dataset is one chunk: today's relay). One host is one chunk: a
    lone receiver (a late joiner) gains nothing from chunks, each would only add a transfer's
    own cost (0.3-1 s), and a failed transfer keeps the files that arrived whole anyway."""
    if chunk_bytes < 1:
        raise ConfigError(f"--chunk-mib must be > 0, got {chunk_bytes / 2**20:g}")
    wanted = round(CHUNKS_PER_ROUND * math.log2(max(1, hosts)))
    return max(1, min(MAX_CHUNKS, wanted, total_bytes // chunk_bytes))


def chunk_plan(sizes: Mapping[str, int], hosts: int, chunk_bytes: int) -> list[tuple[str, ...]]:
    """Pure: the files (path -> size) cut into chunks of about equal bytes, whole files per
    chunk, in path order; ``chunk_count`` chunks at most (fewer when large files leave some
    empty). Every file is in exactly one chunk; there is always at least one chunk."""
    paths = sorted(sizes)
    total = sum(sizes.values())
    count = chunk_count(total, hosts, chunk_bytes)
    chunks: list[list[str]] = [[] for _ in range(count)]
    before = 0
    for path in paths:
        size = sizes[path]
        middle = before + size / 2  # a file goes where its middle byte falls
        index = min(count - 1, int(middle * count // total)) if total else 0
        chunks[index].append(path)
        before += size
    plan = [tuple(c) for c in chunks if c]
    return plan or [()]


class ChunkSchedule:
    """A swarm: who copies which chunk to whom, as a pipelined run goes; pure (no threads, no
    I/O, no clock). ``elastic.sync.pipeline_run`` drives it from its scheduling thread.

    Senders: the peers (``peers``: hosts outside the run that hold a verified copy of the same
    manifest, so every chunk from the start; they never receive), the launcher (every chunk,
    always, never struck off) and each host for the chunks it holds. Each sender sends one
    transfer at a time and each host receives one at a time. ``next_transfers()`` matches free
    senders to idle hosts (a maximum matching; the peers first, then the launcher, then the
    hosts holding most; the hosts furthest behind first), each pair copying the
    rarest chunk -- the fewest holders, transfers under way counted -- that the sender holds
    and the host lacks. With equal transfer times, ``K`` chunks reach ``N`` hosts in
    ``K + ceil(log2(N+1)) - 1`` chunk times, the lower bound (each host receives one chunk at
    a time, the launcher sends each chunk once), for N = 1..5, 7..9, 15..17, 31, 32 and any K;
    at most one chunk time more for the other N up to 32.

    Every started transfer is reported once: ``succeeded`` or ``failed``; before that it may
    be reported ``sent`` (the sender's part is over, the host still checks the chunk): the
    sender is then free to send again, while the host still receives it and holds the chunk
    (serves it, counts for rarity as a holder) only once it ``succeeded``. A host whose every
    chunk arrived is ``complete`` (the runner verifies and commits it) and keeps serving. A
    failed host (``give_up``, or too many failures charged to it) only withdraws its chunks.
    A sender stops serving when its server is gone or after failing ``STRIKES`` different
    hosts in a row; a refused connection to it is not charged to the receiver. A peer, like a
    host, is struck off when it is gone (``failed(..., sender_gone=True)``: the runner also
    says so when a peer's chunk does not match the manifest, its copy differs).
    """

    def __init__(self, hosts: Sequence[str], chunks: int, attempts: int = 3, peers: Sequence[str] = ()) -> None:
        if chunks < 1:
            raise ValueError("a schedule needs a chunk")
        self.hosts = list(hosts)
        self.peers = [p for p in peers if p not in self.hosts and p != LAUNCHER]
        self.chunks = chunks
        self.max_attempts = attempts
        self.have: dict[str, set[int]] = {h: set() for h in self.hosts}
        self.failures: dict[str, int] = {h: 0 for h in self.hosts}   # failures charged to each host
        self.failed_hosts: set[str] = set()
        self.retired: set[str] = set()                  # hosts that serve no one any more
        self.strikes: dict[str, list[str]] = {}         # sender -> hosts it failed in a row
        self.avoid: dict[str, set[str]] = {}            # host -> senders that failed it
        self.sending: set[str] = set()
        self.receiving: dict[str, int] = {}             # host -> chunk under way to it
        self.released: dict[str, str] = {}              # host -> its transfer's sender, freed by ``sent``
        self.transfers = 0                              # transfers started (for reports)

    # -- state -----------------------------------------------------------------------------------

    def complete(self, host: str) -> bool:
        return len(self.have[host]) == self.chunks

    @property
    def running(self) -> int:
        return len(self.receiving)

    @property
    def finished(self) -> bool:
        """Every host complete or failed, and nothing under way."""
        return not self.receiving and all(self.complete(h) or h in self.failed_hosts for h in self.hosts)

    def holders(self, chunk: int) -> int:
        """Hosts holding ``chunk`` or receiving it now (the launcher not counted)."""
        return sum(1 for h in self.hosts if chunk in self.have[h]) + sum(
            1 for c in self.receiving.values() if c == chunk)

    def _serves(self, sender: str) -> bool:
        if sender == LAUNCHER:
            return True
        if sender in self.retired:
            return False
        return sender in self.peers or (sender not in self.failed_hosts and bool(self.have[sender]))

    def _offer(self, sender: str) -> set[int]:
        return set(range(self.chunks)) if sender == LAUNCHER or sender in self.peers else self.have[sender]

    # -- scheduling ------------------------------------------------------------------------------

    def next_transfers(self) -> list[tuple[str, str, int]]:
        """The transfers to start now, ``(sender, host, chunk)``; counted as under way."""
        # the peers and the launcher first (every chunk; the peers spare the launcher's link), then
        # the hosts holding the most chunks (they can serve the most hosts)
        by_holding = sorted((h for h in self.hosts if h != LAUNCHER), key=lambda h: -len(self.have[h]))
        senders = [*self.peers, LAUNCHER, *by_holding]
        senders = [s for s in senders if s not in self.sending and self._serves(s)]
        idle = [h for h in self.hosts
                if h not in self.receiving and h not in self.failed_hosts and not self.complete(h)]
        idle.sort(key=lambda h: len(self.have[h]))  # the hosts furthest behind first

        def wants(sender: str, host: str) -> bool:
            return (sender != host and sender not in self.avoid.get(host, ())
                    and bool(self._offer(sender) - self.have[host]))

        match: dict[str, str] = {}  # host -> sender

        def augment(sender: str, seen: set[str]) -> bool:
            for host in idle:
                if host in seen or not wants(sender, host):
                    continue
                seen.add(host)
                if host not in match or augment(match[host], seen):
                    match[host] = sender
                    return True
            return False

        for sender in senders:
            augment(sender, set())
        started: list[tuple[str, str, int]] = []
        for sender in senders:  # rarest first; the peers' and the launcher's pairs choose first
            for host, s in match.items():
                if s != sender:
                    continue
                choices = self._offer(sender) - self.have[host]
                chunk = min(choices, key=lambda c: (self.holders(c), c))
                self.sending.add(sender)
                self.receiving[host] = chunk
                self.transfers += 1
                started.append((sender, host, chunk))
        return started

    def sent(self, sender: str, host: str, chunk: int) -> None:
        """The transfer's data arrived on ``host``, which now checks it: ``sender`` is free to
        send again; ``host`` still receives this chunk until it ``succeeded`` or ``failed``."""
        self._check(sender, host, chunk)
        self.sending.discard(sender)
        self.released[host] = sender

    def succeeded(self, sender: str, host: str, chunk: int) -> None:
        """The transfer arrived and was verified on ``host``."""
        self._end(sender, host, chunk)
        if host not in self.failed_hosts:
            self.have[host].add(chunk)
        self.strikes.pop(sender, None)

    def failed(self, sender: str, host: str, chunk: int, *, refused: bool = False, sender_gone: bool = False,
               fatal: bool = False, blame_sender: bool = True) -> bool:
        """The transfer failed. ``sender_gone``: the sender's server is gone (it serves no one
        any more); ``refused``: the connection to the sender was refused; neither is charged to
        ``host``. Otherwise ``host`` is charged a failure and the sender a strike. ``fatal``:
        another attempt cannot heal the host; ``blame_sender=False``: the host itself was
        unreachable (no strike). Returns True when ``host`` is given up."""
        self._end(sender, host, chunk)
        if sender != LAUNCHER:
            self.avoid.setdefault(host, set()).add(sender)
            if sender_gone:
                self.retired.add(sender)
            elif blame_sender:
                struck = self.strikes.setdefault(sender, [])
                if host not in struck:
                    struck.append(host)
                if len(struck) >= STRIKES:
                    self.retired.add(sender)
        if host in self.failed_hosts:
            return True
        if fatal:
            self.give_up(host)
            return True
        if sender != LAUNCHER and (refused or sender_gone):
            return False
        self.failures[host] += 1
        if self.failures[host] >= self.max_attempts:
            self.give_up(host)
            return True
        return False

    def give_up(self, host: str) -> None:
        """``host`` failed (too many failures, its commit failed, it is gone): it withdraws its
        chunks and serves no one; transfers under way from it are reported as they end."""
        self.failed_hosts.add(host)
        self.have[host] = set()

    def give_up_all(self) -> list[str]:
        """Cancelled: every host neither complete nor failed is given up; returns them."""
        left = [h for h in self.hosts if h not in self.failed_hosts and not self.complete(h)]
        for h in left:
            self.give_up(h)
        return left

    def _check(self, sender: str, host: str, chunk: int) -> None:
        if self.receiving.get(host) != chunk or sender not in self.sending or host in self.released:
            raise AssertionError(f"chunk schedule: no transfer {sender} -> {host} of chunk {chunk}")

    def _end(self, sender: str, host: str, chunk: int) -> None:
        if self.released.get(host) == sender and self.receiving.get(host) == chunk:
            del self.released[host]
        else:
            self._check(sender, host, chunk)
            self.sending.discard(sender)
        del self.receiving[host]
