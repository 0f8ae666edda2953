"""``discover-hosts``: the script horovodrun runs every second. Standard library only.

Asks the discovery daemon (``DISCOVERY_URL``, default ``http://127.0.0.1:$DISCOVERY_PORT``,
or ``unix:/path/to.sock``) for ``/hosts`` and prints its ``host:slots`` lines, and nothing
else, on stdout. The answer is trusted only when it is complete (Content-Length matches,
every line is ``host:slots``) and the daemon's ``X-Discovery-Age`` is within ``--max-age``.

Otherwise ``--fallback`` decides:

- ``none``  (default) print one line on stderr and exit 1; horovodrun keeps its last host
  set and asks again.
- ``cache`` print the last trusted answer from ``--cache-file`` if it is younger than
  ``--max-cache-age`` (every trusted answer refreshes the cache, atomically).
- ``api``   one LIST against the Kubernetes API (kubeconfig token, client certificate or exec
  credential plugin, or the in-cluster service account) through the same pure rule the
  daemon uses (``discovery.discover_api``).

Lines are read as Horovod reads them (split on ``\n`` only). A line whose host is not an
IPv4 literal or an RFC 1123 name, or whose slots are not ASCII digits in 1..1024, is left
out and reported on stderr (``warning: ...``); the other hosts are printed, so one bad pod
never stops a job from scaling. ``--timeout`` bounds the whole exchange with the daemon,
however slowly it answers. A ``--group`` the daemon has never seen on any pod is printed
as an empty list with a warning (the job's pods may not exist yet).

Exit codes: 0 an answer was printed; 1 no trustworthy answer; 2 bad settings.
Never a partial list: output is validated first and written with one call.

Start-up is most of a poll's CPU: a poll the daemon answers imports only ``sys``,
``_socket``, ``time`` and the project's small modules here -- no ``os`` (see ``getenv``), no
``re``, ``enum`` or ``json``; the cache and api fallbacks import what they need when they run
(the api fallback runs the ``site`` module first when Python was started with ``-S``, as
``bin/discover-hosts`` does, for PyYAML).
"""
from __future__ import annotations

import sys

from discovery.environment import (
    DISCOVERY_ADDRESS,
    DISCOVERY_CACHE_FILE,
    DISCOVERY_CLUSTER_DOMAIN,
    DISCOVERY_DEFAULT_SLOTS,
    DISCOVERY_FALLBACK,
    DISCOVERY_GROUP,
    DISCOVERY_GROUP_BY,
    DISCOVERY_MAX_AGE,
    DISCOVERY_MAX_CACHE_AGE,
    DISCOVERY_TIMEOUT,
)
from discovery.errors import ConfigError, DiscoveryError, Failure, UsageError
from shared import daemon_client
from shared import discovery_wire as wire
from shared.environment import (
    DISCOVERY_NAMESPACE,
    DISCOVERY_PORT,
    DISCOVERY_SELECTOR,
    DISCOVERY_TOKEN,
    DISCOVERY_URL,
    XDG_CACHE_HOME,
)
from shared.exitcodes import EXIT_FAILURE, EXIT_OK
from shared.hosts import MAX_SLOTS, host_ok  # the one host rule (discovery.hosts and elastic use it too)
from shared.runner import run_main

EXIT_NO_ANSWER = EXIT_FAILURE
FALLBACKS = ("none", "cache", "api")
MAX_BODY = 16 << 20        # bytes of an answer we read at most
MAX_WARNINGS = 5           # bad lines reported one by one; the rest counted


HELP = """usage: discover-hosts [--url URL] [--group G] [--token T] [--timeout S] [--max-age S]
                      [--fallback none|cache|api] [--cache-file F] [--max-cache-age S]
                      [--namespace NS] [--selector SEL] [--kubeconfig F] [--default-slots N]
                      [--address ip|dns|name] [--group-by LABEL]

Print the job's hosts as host:slots lines, from the discovery daemon.

options (each also an environment variable):
  --url URL            daemon URL, http://HOST:PORT or unix:/path (DISCOVERY_URL;
                       default http://127.0.0.1:$DISCOVERY_PORT, port 8642)
  --group G            the job's group with a daemon run with --group-by (DISCOVERY_GROUP)
  --token T            bearer token (DISCOVERY_TOKEN)
  --timeout S          seconds to wait for the daemon (DISCOVERY_TIMEOUT, default 2)
  --max-age S          refuse a list the daemon says is older than this
                       (DISCOVERY_MAX_AGE, default 30)
  --fallback MODE      none | cache | api when the daemon gives no trustworthy answer
                       (DISCOVERY_FALLBACK, default none)
  --cache-file F       last good answer (DISCOVERY_CACHE_FILE; default
                       $XDG_CACHE_HOME/elastic-horovod/discover-hosts-<url>[-<group>])
  --max-cache-age S    oldest cached answer to print (DISCOVERY_MAX_CACHE_AGE, default 300)
  api fallback: --namespace (DISCOVERY_NAMESPACE, default 'default'), --selector
    (DISCOVERY_SELECTOR), --kubeconfig (KUBECONFIG; else ~/.kube/config, else in-cluster),
    --default-slots (DISCOVERY_DEFAULT_SLOTS, 1), --address (DISCOVERY_ADDRESS, ip),
    --group-by (DISCOVERY_GROUP_BY), --cluster-domain (DISCOVERY_CLUSTER_DOMAIN)

exit codes: 0 hosts printed, 1 no trustworthy answer (one line on stderr), 2 bad settings
"""

OPTIONS = {  # flag -> (environment variable, default)
    "--url": (DISCOVERY_URL, None), "--group": (DISCOVERY_GROUP, None),
    "--token": (DISCOVERY_TOKEN, None), "--timeout": (DISCOVERY_TIMEOUT, "2"),
    "--max-age": (DISCOVERY_MAX_AGE, "30"), "--fallback": (DISCOVERY_FALLBACK, "none"),
    "--cache-file": (DISCOVERY_CACHE_FILE, None),
    "--max-cache-age": (DISCOVERY_MAX_CACHE_AGE, "300"),
    "--namespace": (DISCOVERY_NAMESPACE, "default"), "--selector": (DISCOVERY_SELECTOR, None),
    "--kubeconfig": ("KUBECONFIG", None), "--default-slots": (DISCOVERY_DEFAULT_SLOTS, "1"),
    "--address": (DISCOVERY_ADDRESS, "ip"), "--group-by": (DISCOVERY_GROUP_BY, None),
    "--cluster-domain": (DISCOVERY_CLUSTER_DOMAIN, "cluster.local"),
}


def getenv(name: str) -> str | None:
    """``os.environ.get(name)`` without importing ``os`` on the fast path (~1 ms of CPU a
    poll): ``os.environ`` once ``os`` is loaded (so changes made through it count), else the
    process's environment as ``os.environ`` decodes it (file system encoding, surrogateescape)."""
    os = sys.modules.get("os")
    if os is not None:
        return os.environ.get(name)
    from posix import environ
    value = environ.get(name.encode(sys.getfilesystemencoding(), "surrogateescape"))
    return None if value is None else value.decode(sys.getfilesystemencoding(), "surrogateescape")


def parse_args(argv: list[str]) -> dict:
    """argv -> settings (flags over environment over defaults). ``UsageError`` on bad input."""
    opts: dict = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, value = arg.partition("=")
        if flag not in OPTIONS:
            raise UsageError(f"unknown argument {arg!r} (see --help)")
        if not eq:
            i += 1
            if i >= len(argv):
                raise UsageError(f"{flag} needs a value")
            value = argv[i]
        opts[flag] = value
        i += 1
    s: dict = {}
    for flag, (env, default) in OPTIONS.items():
        v = opts.get(flag)
        if v is None:
            v = getenv(env) or default
        s[flag[2:].replace("-", "_")] = v
    if s["url"] is None:
        port = getenv(DISCOVERY_PORT) or "8642"
        s["url"] = f"http://127.0.0.1:{port}"
    for key in ("timeout", "max_age", "max_cache_age"):
        try:
            s[key] = float(s[key])
        except ValueError:
            raise UsageError(f"--{key.replace('_', '-')} must be a number, got {s[key]!r}") from None
        if not 0 < s[key] < 1e9:  # also refuses nan and inf
            raise UsageError(f"--{key.replace('_', '-')} must be > 0 and finite, got {s[key]:g}")
    s["warnings"] = []
    if s["fallback"] not in FALLBACKS:
        raise UsageError(f"--fallback must be one of {', '.join(FALLBACKS)}, got {s['fallback']!r}")
    return s


# -- the daemon ------------------------------------------------------------------------------
def split_url(url: str) -> tuple[str, str | tuple[str, int], str]:
    """``URL`` -> ``(family, address, path prefix)``; ``UsageError`` if it is not one we speak
    (``shared.daemon_client.split_url``)."""
    try:
        return daemon_client.split_url(url)
    except daemon_client.BadURL as e:
        raise UsageError(str(e)) from None


def _quote(text: str) -> str:
    """Percent-encode for a query value (``urllib.parse`` costs startup time)."""
    safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~"
    return "".join(c if c in safe else "".join(f"%{b:02X}" for b in c.encode()) for c in text)


def http_get(url: str, path: str, token: str | None, timeout: float) -> tuple[int, dict, bytes]:
    """One GET through ``shared.daemon_client`` -> (status, headers lower-cased, body).
    ``Failure`` on any trouble; ``timeout`` (``--timeout``) bounds the whole exchange."""
    split_url(url)
    try:
        return daemon_client.get(url, path, token, timeout, MAX_BODY)
    except daemon_client.Unanswered as e:
        if e.timed_out:
            raise Failure(f"daemon at {url}: no complete answer within --timeout {timeout:g}s") from None
        raise Failure(str(e)) from None


def validate(body: bytes, source: str, warnings: list | None = None) -> bytes:
    """The good ``host:slots`` lines of ``body`` (slots ASCII digits in 1..1024).

    Lines are split on ``\n`` only, as Horovod splits them. A bad line is left out and
    described in ``warnings`` (escaped); ``Failure`` only when the answer as a whole is not
    one (not UTF-8, no final newline)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Failure(f"{source}: answer is not UTF-8") from None
    if text and not text.endswith("\n"):
        raise Failure(f"{source}: answer does not end with a newline (partial?)")
    good = []
    bad = 0
    seen = set()
    for line in text[:-1].split("\n") if text else ():
        host, sep, slots = line.partition(":")
        if (sep and host_ok(host) and slots.isascii() and slots.isdigit()
                and 0 < int(slots) <= MAX_SLOTS and host not in seen):
            seen.add(host)
            good.append(line + "\n")
            continue
        bad += 1
        if warnings is not None and bad <= MAX_WARNINGS:
            warnings.append(f"{source}: left out a malformed line {line[:80]!r}")
    if bad > MAX_WARNINGS and warnings is not None:
        warnings.append(f"{source}: left out {bad - MAX_WARNINGS} more malformed lines")
    return "".join(good).encode() if bad else body


def from_daemon(s: dict) -> bytes:
    path = wire.HOSTS
    if s["group"]:
        path += f"?{wire.GROUP_PARAM}=" + _quote(s["group"])
    status, headers, body = http_get(s["url"], path, s["token"], s["timeout"])
    if status != 200:
        msg = body.decode("utf-8", "replace").strip().splitlines()
        raise Failure(f"daemon at {s['url']}: HTTP {status}" + (f": {msg[0][:160]}" if msg else ""))
    try:
        age = float(headers.get(wire.AGE_LOWER, "nan"))
    except ValueError:
        age = float("nan")
    if not 0 <= age <= s["max_age"]:  # also catches a missing header (nan) and -inf
        raise Failure(f"daemon at {s['url']}: list is stale ({age:g}s old, --max-age {s['max_age']:g})")
    if s["group"] and headers.get(wire.GROUP_LOWER) == wire.GROUP_UNKNOWN:
        s["warnings"].append(f"daemon at {s['url']}: no pod has ever carried group {s['group'][:80]!r} "
                             "(a typo in --group? the job's pods not created yet?)")
    return validate(body, f"daemon at {s['url']}", s["warnings"])


# -- the cache -------------------------------------------------------------------------------
def cache_path(s: dict) -> str:
    import os  # the cache only: kept off the fast path
    if s["cache_file"]:
        return s["cache_file"]
    base = os.environ.get(XDG_CACHE_HOME) or os.path.join(os.path.expanduser("~"), ".cache")
    key = s["url"] + (f"-{s['group']}" if s["group"] else "")
    safe = "".join(c if c.isalnum() or c in "-." else "_" for c in key)
    return os.path.join(base, "elastic-horovod", f"discover-hosts-{safe}")


def save_cache(path: str, body: bytes) -> None:
    """Remember a trusted answer: rewrite atomically if it changed, else refresh the mtime."""
    import os  # the cache only: kept off the fast path
    try:
        with open(path, "rb") as f:
            same = f.read() == body
    except OSError:
        same = False
    try:
        if same:
            os.utime(path)
            return
        from shared.atomicfile import write_atomic  # cache mode only: kept off the fast path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        write_atomic(path, body)
    except OSError:
        pass  # the cache is an optimisation; the answer itself is good


def from_cache(s: dict) -> bytes:
    import os  # the cache only: kept off the fast path
    import time
    path = cache_path(s)
    try:
        with open(path, "rb") as f:
            age = time.time() - os.fstat(f.fileno()).st_mtime
            body = f.read()
    except OSError as e:
        raise Failure(f"cache {path}: {e.strerror or e}") from None
    if age > s["max_cache_age"]:
        raise Failure(f"cache {path} is {age:.0f}s old (--max-cache-age {s['max_cache_age']:g})")
    return validate(body, f"cache {path}", s["warnings"])


# -- main --------------------------------------------------------------------------------------
def answer(s: dict) -> bytes:
    """The trustworthy answer, or ``Failure`` naming every source that failed."""
    try:
        body = from_daemon(s)
    except Failure as first:
        if s["fallback"] == "none":
            raise
        try:
            if s["fallback"] == "cache":
                return from_cache(s)
            if sys.flags.no_site:  # started with -S (bin/discover-hosts): PyYAML is in site-packages
                import site
                site.main()
            from discovery.discover_api import from_api
            return validate(from_api(s), "api fallback", s["warnings"])
        except Failure as second:
            raise Failure(f"{first}; {s['fallback']} fallback: {second}") from None
    if s["fallback"] == "cache":
        save_cache(cache_path(s), body)
    return body


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "-h" in argv or "--help" in argv:
        sys.stdout.write(HELP)
        return EXIT_OK
    return run_main("discover-hosts", lambda: _print_answer(argv), usage=ConfigError, failure=DiscoveryError)


def _print_answer(argv: list[str]) -> int:
    s = parse_args(argv)  # UsageError -> 2, Failure -> 1 (run_main)
    try:
        body = answer(s)
    finally:  # the skipped lines are named before the answer or the error line
        if s["warnings"]:
            sys.stderr.write("".join(f"warning: {w}\n" for w in s["warnings"]))
    try:
        sys.stdout.buffer.write(body)
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        return EXIT_NO_ANSWER
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
