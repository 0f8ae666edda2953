"""``ssh-bootstrap``: per-job SSH keys, pinned host keys, ssh_config/hostfile, connectivity table.

    ssh-bootstrap keys --out DIR [--secret-name N] [--namespace NS] [--apply [--kubeconfig F]] [--force]
        writes DIR/id_ed25519 (0600), DIR/id_ed25519.pub, DIR/secret.yaml; prints paths, the
        public key and its fingerprint -- never the private key.
    ssh-bootstrap hosts --identity FILE --out DIR [--port P] [--hosts h1,h2 | --hosts-file F]
                        [--repin-for-uid UID] [--replace-hostfile]
        pins each host's key in DIR/known_hosts, writes DIR/ssh_config, DIR/bin/ssh, merges the
        hosts that passed into DIR/hostfile (other hosts' lines stay; --replace-hostfile
        writes only this call's), prints the per-host table and the horovodrun
        flags/environment; exit 1 if any host failed (a changed host key is refused loudly),
        2 on bad input.  --repin-for-uid UID (one host; the discovery daemon's
        DISCOVERY_POD_UID): if the address's pin was recorded (DIR/pins.json) for another pod
        uid, the address belongs to a new pod and its key replaces the pin (PIN "repinned").
    ssh-bootstrap horovodrun-args --out DIR [--hostfile] [--json]
        prints the horovodrun flags and environment for DIR.

Environment: ELASTIC_SSH_DIR (--out), ELASTIC_SSH_IDENTITY, ELASTIC_SSH_PORT, ELASTIC_SSH_USER,
ELASTIC_HOSTS, ELASTIC_HOSTS_FILE, ELASTIC_SSH_JOBS, ELASTIC_SSH_TIMEOUT, DISCOVER_HOSTS_CMD.
Python API: ``elastic.ssh.keys`` (generate_keypair, write_keys), ``elastic.ssh.bootstrap``
(bootstrap_hosts), ``elastic.ssh.config`` (horovodrun_args, horovodrun_env).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from elastic.common.cli import env_default, env_int, hosts_from_args, setup_logging
from elastic.environment import (
    DISCOVER_HOSTS_CMD,
    ELASTIC_HOSTS,
    ELASTIC_HOSTS_FILE,
    ELASTIC_NAMESPACE,
    ELASTIC_SSH_DIR,
    ELASTIC_SSH_IDENTITY,
    ELASTIC_SSH_JOBS,
    ELASTIC_SSH_PORT,
    ELASTIC_SSH_TIMEOUT,
    ELASTIC_SSH_USER,
)
from elastic.errors import ConfigError, ElasticError
from elastic.ssh.config import BootstrapDir, horovodrun_args, horovodrun_env_delta
from elastic.ssh.keys import DEFAULT_SECRET_NAME, apply_secret, generate_keypair, public_fingerprint, write_keys
from shared.argparser import OneLineParser
from shared.exitcodes import EXIT_FAILURE, EXIT_OK
from shared.runner import run_main


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="ssh-bootstrap", description=__doc__.split("\n\n")[0].replace("``", ""))
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    keys = sub.add_parser("keys", help="generate the job's ed25519 key pair and Secret manifest")
    keys.add_argument("--out", default=env_default(ELASTIC_SSH_DIR), help="output directory [ELASTIC_SSH_DIR]")
    keys.add_argument("--secret-name", default=DEFAULT_SECRET_NAME, help="Secret name (default %(default)s)")
    keys.add_argument("--namespace", default=env_default(ELASTIC_NAMESPACE),
                      help="Secret namespace [ELASTIC_NAMESPACE]")
    keys.add_argument("--comment", default="elastic-horovod", help="public key comment")
    keys.add_argument("--apply", action="store_true", help="also create the Secret through the Kubernetes API")
    keys.add_argument("--kubeconfig", default=env_default("KUBECONFIG"), help="kubeconfig for --apply [KUBECONFIG]")
    keys.add_argument("--force", action="store_true", help="replace an existing key / Secret")

    hosts = sub.add_parser("hosts", help="pin host keys, write ssh_config and hostfile, check every host")
    hosts.add_argument("--identity", default=env_default(ELASTIC_SSH_IDENTITY),
                       help="private key [ELASTIC_SSH_IDENTITY]")
    hosts.add_argument("--out", default=env_default(ELASTIC_SSH_DIR), help="output directory [ELASTIC_SSH_DIR]")
    hosts.add_argument("--port", type=int, default=None,
                       help="SSH port of every host (default 2222) [ELASTIC_SSH_PORT]")
    hosts.add_argument("--user", default=env_default(ELASTIC_SSH_USER, "root"), help="login user [ELASTIC_SSH_USER]")
    hosts.add_argument("--hosts", default=env_default(ELASTIC_HOSTS), help="h1,h2:slots,... [ELASTIC_HOSTS]")
    hosts.add_argument("--hosts-file", default=env_default(ELASTIC_HOSTS_FILE),
                       help="file of host[:slots] lines [ELASTIC_HOSTS_FILE]")
    hosts.add_argument("--discover-cmd", default=env_default(DISCOVER_HOSTS_CMD, "discover-hosts"),
                       help="command printing host:slots lines, used when no hosts are given (default %(default)s)")
    hosts.add_argument("--slots", type=int, default=1, help="slots for hosts given without them (default 1)")
    hosts.add_argument("--jobs", type=int, default=None, help="hosts handled at once (default 16) [ELASTIC_SSH_JOBS]")
    hosts.add_argument("--repin-for-uid", default=None, metavar="UID",
                       help="the single host is pod UID: replace its pin if it was pinned for another uid")
    hosts.add_argument("--replace-hostfile", action="store_true",
                       help="write DIR/hostfile with only this call's good hosts (default: merge)")
    hosts.add_argument("--timeout", type=float, default=None,
                       help="seconds per connection (default 10) [ELASTIC_SSH_TIMEOUT]")

    args = sub.add_parser("horovodrun-args", help="print the horovodrun flags and environment for DIR")
    args.add_argument("--out", default=env_default(ELASTIC_SSH_DIR),
                      help="the hosts --out directory [ELASTIC_SSH_DIR]")
    args.add_argument("--hostfile", action="store_true", help="include --hostfile DIR/hostfile")
    args.add_argument("--json", action="store_true", help='print {"args": [...], "env": {...}}')
    return parser


def _require(value: str | None, flag: str) -> str:
    if not value:
        raise ConfigError(f"{flag} is required")
    return value


def _keys(ns: argparse.Namespace) -> int:
    out = _require(ns.out, "--out")
    pair = generate_keypair(ns.comment)
    files = write_keys(out, pair, secret_name=ns.secret_name, namespace=ns.namespace, force=ns.force)
    print(f"private key: {files.private} (mode 0600)")
    print(f"public key:  {files.public}")
    print(f"secret:      {files.secret} (Secret {ns.secret_name})")
    print(f"fingerprint: {public_fingerprint(pair.public_line)}")
    print(pair.public_line.strip())
    if ns.apply:
        namespace = ns.namespace or "default"
        outcome = apply_secret(pair, ns.secret_name, namespace, ns.kubeconfig, ns.force)
        print(f"Secret {namespace}/{ns.secret_name} {outcome}")
    return EXIT_OK


def _print_horovodrun(d: BootstrapDir, hostfile: bool) -> None:
    print("horovodrun flags: " + " ".join(shlex.quote(a) for a in horovodrun_args(d, hostfile=hostfile)))
    for key, value in horovodrun_env_delta(d).items():
        print(f"horovodrun env:   {key}={value}")


def _hosts(ns: argparse.Namespace) -> int:
    from elastic.common.hostsource import discover_hosts
    from elastic.ssh.bootstrap import bootstrap_hosts, render_results

    identity = _require(ns.identity, "--identity")
    out = _require(ns.out, "--out")
    port = ns.port if ns.port is not None else env_int(ELASTIC_SSH_PORT, 2222)
    jobs = ns.jobs if ns.jobs is not None else env_int(ELASTIC_SSH_JOBS, 16)
    timeout = ns.timeout if ns.timeout is not None else float(env_int(ELASTIC_SSH_TIMEOUT, 10))
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    if ns.slots < 1:
        raise ConfigError(f"--slots must be >= 1, got {ns.slots}")
    hosts = hosts_from_args(ns.hosts, ns.hosts_file, None, lambda: discover_hosts(ns.discover_cmd), ns.slots)
    results = bootstrap_hosts(hosts, identity, out, port=port, user=ns.user, jobs=jobs, timeout=timeout,
                              repin_uid=ns.repin_for_uid, replace_hostfile=ns.replace_hostfile)
    print(render_results(results))
    for r in results:
        if not r.ok and r.error:
            print(f"error: {r.error}", file=sys.stderr)
        if r.pin == "repinned":
            print(f"warning: {r.host}: re-pinned for new pod uid {ns.repin_for_uid}: "
                  f"{r.previous_fingerprint} -> {r.fingerprint}", file=sys.stderr)
    failed = [r.host for r in results if not r.ok]
    d = BootstrapDir(out)
    print(f"wrote {d.known_hosts}, {d.ssh_config}, {d.hostfile}, {d.ssh_wrapper}")
    _print_horovodrun(d, hostfile=True)
    if failed:
        print(f"error: {len(failed)} of {len(results)} hosts failed: {', '.join(failed)}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def _horovodrun_args(ns: argparse.Namespace) -> int:
    d = BootstrapDir(_require(ns.out, "--out"))
    if ns.json:
        print(json.dumps({"args": horovodrun_args(d, hostfile=ns.hostfile), "env": horovodrun_env_delta(d)}))
    else:
        _print_horovodrun(d, ns.hostfile)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``ssh-bootstrap``; returns the exit code."""
    ns = _parser().parse_args(argv)
    setup_logging(ns.verbose)
    handler = {"keys": _keys, "hosts": _hosts, "horovodrun-args": _horovodrun_args}[ns.command]
    return run_main("ssh-bootstrap", lambda: handler(ns), usage=ConfigError, failure=ElasticError)


if __name__ == "__main__":
    sys.exit(main())
