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
"""
from __future__ import annotations

import _socket  # the C module: ``socket`` would pull in ``enum`` and more (startup time)
import os
import sys

from discovery.atomicfile import write_atomic
from discovery.cli_runner import run_main
from discovery.errors import Failure, UsageError

EXIT_OK, EXIT_NO_ANSWER = 0, 1
FALLBACKS = ("none", "cache", "api")
MAX_SLOTS = 1024           # as discovery.hosts.MAX_SLOTS (not imported: start-up time)
MAX_BODY = 16 << 20        # bytes of an answer we read at most
MAX_WARNINGS = 5           # bad lines reported one by one; the rest counted
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.")


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
    "--url": ("DISCOVERY_URL", None), "--group": ("DISCOVERY_GROUP", None),
    "--token": ("DISCOVERY_TOKEN", None), "--timeout": ("DISCOVERY_TIMEOUT", "2"),
    "--max-age": ("DISCOVERY_MAX_AGE", "30"), "--fallback": ("DISCOVERY_FALLBACK", "none"),
    "--cache-file": ("DISCOVERY_CACHE_FILE", None),
    "--max-cache-age": ("DISCOVERY_MAX_CACHE_AGE", "300"),
    "--namespace": ("DISCOVERY_NAMESPACE", "default"), "--selector": ("DISCOVERY_SELECTOR", None),
    "--kubeconfig": ("KUBECONFIG", None), "--default-slots": ("DISCOVERY_DEFAULT_SLOTS", "1"),
    "--address": ("DISCOVERY_ADDRESS", "ip"), "--group-by": ("DISCOVERY_GROUP_BY", None),
    "--cluster-domain": ("DISCOVERY_CLUSTER_DOMAIN", "cluster.local"),
}


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
            v = os.environ.get(env) or default
        s[flag[2:].replace("-", "_")] = v
    if s["url"] is None:
        port = os.environ.get("DISCOVERY_PORT") or "8642"
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
    """``URL`` -> ``(family, address, path prefix)``; ``UsageError`` if it is not one we speak."""
    if url.startswith("unix:"):
        path = url[5:]
        if path.startswith("//"):
            path = path[2:]
        if not path:
            raise UsageError(f"bad DISCOVERY_URL {url!r}: no socket path")
        return "unix", path, ""
    if not url.startswith("http://"):
        raise UsageError(f"bad DISCOVERY_URL {url!r}: want http://HOST:PORT or unix:/path")
    rest = url[7:]
    hostport, slash, prefix = rest.partition("/")
    prefix = ("/" + prefix).rstrip("/") if slash else ""
    if hostport.startswith("["):
        host, _, port = hostport[1:].partition("]")
        port = port[1:] if port.startswith(":") else ""
    else:
        host, _, port = hostport.partition(":")
    try:
        port_n = int(port or 80)
    except ValueError:
        raise UsageError(f"bad DISCOVERY_URL {url!r}: port {port!r}") from None
    if not host:
        raise UsageError(f"bad DISCOVERY_URL {url!r}: no host")
    return "tcp", (host, port_n), prefix


def _connect(address: tuple[str, int], timeout: float) -> _socket.socket:
    """``socket.create_connection`` without importing ``socket``: try each address in turn."""
    host, port = address
    for family in (_socket.AF_INET, _socket.AF_INET6):
        try:
            _socket.inet_pton(family, host)
        except OSError:
            continue
        # an IP literal: connect directly; getaddrinfo would load the resolver (~20 ms of CPU)
        sock = _socket.socket(family, _socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect((host, port))
        except OSError:
            sock.close()
            raise
        return sock
    error: OSError = OSError("no address")
    for family, kind, proto, _, sockaddr in _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        sock.settimeout(timeout)
        try:
            sock.connect(sockaddr)
            return sock
        except OSError as e:
            sock.close()
            error = e
    raise error


def _quote(text: str) -> str:
    """Percent-encode for a query value (``urllib.parse`` costs startup time)."""
    safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~"
    return "".join(c if c in safe else "".join(f"%{b:02X}" for b in c.encode()) for c in text)


def http_get(url: str, path: str, token: str | None, timeout: float) -> tuple[int, dict, bytes]:
    """One HTTP/1.0 GET -> (status, headers lower-cased, body). ``Failure`` on any trouble.

    ``timeout`` bounds the whole exchange (connect, send, every read): a daemon that
    answers one byte a second is cut off when it runs out, not reset by each byte."""
    import time
    deadline = time.monotonic() + timeout
    _, address, prefix = split_url(url)
    try:
        if isinstance(address, str):  # unix:/path
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(address)
        else:
            sock = _connect(address, timeout)
    except OSError as e:
        raise Failure(f"daemon at {url} unreachable ({e.strerror or e})") from None
    try:
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        chunks = []
        size = 0
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        sock.sendall(f"GET {prefix}{path} HTTP/1.0\r\nHost: discovery\r\n{auth}\r\n".encode())
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
            data = sock.recv(65536)
            if not data:
                break
            size += len(data)
            if size > MAX_BODY:
                raise Failure(f"daemon at {url}: answer larger than {MAX_BODY} bytes")
            chunks.append(data)
    except TimeoutError:
        raise Failure(f"daemon at {url}: no complete answer within --timeout {timeout:g}s") from None
    except OSError as e:
        raise Failure(f"daemon at {url}: {e.strerror or e}") from None
    finally:
        sock.close()
    raw = b"".join(chunks)
    head, sep, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if not sep or len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise Failure(f"daemon at {url}: malformed HTTP response")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    length = headers.get("content-length")
    if length is None or not length.isdigit() or int(length) != len(body):
        raise Failure(f"daemon at {url}: truncated response")
    return int(parts[1]), headers, body


def host_ok(host: str) -> bool:
    """``host`` is an IPv4 literal in canonical form or an RFC 1123 name (what the daemon's
    ``discovery.hosts.servable`` allows, checked again here without importing it)."""
    if not host or len(host) > 253 or not _NAME_CHARS.issuperset(host):
        return False
    labels = host.split(".")
    for label in labels:
        if not label or len(label) > 63 or label[0] == "-" or label[-1] == "-":
            return False
    if not labels[-1].isdigit():
        return True
    if len(labels) != 4 or not all(label.isdigit() and str(int(label)) == label for label in labels):
        return False
    return 0 < int(labels[0]) < 224 and all(int(label) <= 255 for label in labels)  # no 0/8, multicast


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
    path = "/hosts"
    if s["group"]:
        path += "?group=" + _quote(s["group"])
    status, headers, body = http_get(s["url"], path, s["token"], s["timeout"])
    if status != 200:
        msg = body.decode("utf-8", "replace").strip().splitlines()
        raise Failure(f"daemon at {s['url']}: HTTP {status}" + (f": {msg[0][:160]}" if msg else ""))
    try:
        age = float(headers.get("x-discovery-age", "nan"))
    except ValueError:
        age = float("nan")
    if not 0 <= age <= s["max_age"]:  # also catches a missing header (nan) and -inf
        raise Failure(f"daemon at {s['url']}: list is stale ({age:g}s old, --max-age {s['max_age']:g})")
    if s["group"] and headers.get("x-discovery-group") == "unknown":
        s["warnings"].append(f"daemon at {s['url']}: no pod has ever carried group {s['group'][:80]!r} "
                             "(a typo in --group? the job's pods not created yet?)")
    return validate(body, f"daemon at {s['url']}", s["warnings"])


# -- the cache -------------------------------------------------------------------------------
def cache_path(s: dict) -> str:
    if s["cache_file"]:
        return s["cache_file"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = s["url"] + (f"-{s['group']}" if s["group"] else "")
    safe = "".join(c if c.isalnum() or c in "-." else "_" for c in key)
    return os.path.join(base, "elastic-horovod", f"discover-hosts-{safe}")


def save_cache(path: str, body: bytes) -> None:
    """Remember a trusted answer: rewrite atomically if it changed, else refresh the mtime."""
    try:
        with open(path, "rb") as f:
            same = f.read() == body
    except OSError:
        same = False
    try:
        if same:
            os.utime(path)
            return
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        write_atomic(path, body)
    except OSError:
        pass  # the cache is an optimisation; the answer itself is good


def from_cache(s: dict) -> bytes:
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
    return run_main("discover-hosts", lambda: _print_answer(argv))


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
