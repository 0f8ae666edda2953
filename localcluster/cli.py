"""``local-cluster``: a loopback Kubernetes pod API whose pods are sshd hosts on this machine.

    local-cluster up [--workers N] [--slots S] [--gpus G] [--ssh-port P] [--isolation namespaces|none]
                     [--runtime processes|containers --image IMAGE]
    local-cluster status [--json]
    local-cluster scale N [--slots S] [--gpus G]
    local-cluster add-pod [--name NAME] [--slots S] [--gpus G]
    local-cluster delete-pod NAME [--grace SECONDS]
    local-cluster fault restart-api|drop-watches|compact|latency [--seconds S]
    local-cluster down

Every command takes ``--state-dir DIR`` (``LOCAL_CLUSTER_STATE_DIR``; default
``~/.cache/elastic-horovod/local-cluster``). ``up`` needs root for isolated pods (own hostname,
own ``/data``: Linux namespaces); without root, ``--isolation none`` runs each pod's sshd
directly (own address and port only; its data directory is ``DIR/pods/<pod>/data``).
``--runtime containers --image IMAGE`` (root, podman) runs each pod as a container of the worker
image (``images/Dockerfile``, built by ``scripts/build-images``) instead of the host's sshd;
the default ``processes`` starts pods faster.
Errors print one line ``error: ...``; exit 2 for bad input (flags, arguments, environment), 1 for
other failures (``shared.runner``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from localcluster.environment import (
    LOCAL_CLUSTER_IMAGE,
    LOCAL_CLUSTER_ISOLATION,
    LOCAL_CLUSTER_RUNTIME,
    LOCAL_CLUSTER_SLOTS,
    LOCAL_CLUSTER_SSH_PORT,
    LOCAL_CLUSTER_STATE_DIR,
    LOCAL_CLUSTER_WORKERS,
)
from shared.argparser import OneLineParser
from shared.envvars import env_int
from shared.exitcodes import EXIT_OK
from shared.runner import run_main

from . import control
from .errors import LocalClusterError, UsageError
from .statefiles import StatePaths, default_state_dir


def build_parser() -> argparse.ArgumentParser:
    default_dir = os.environ.get(LOCAL_CLUSTER_STATE_DIR) or str(default_state_dir())
    helptext = f"state directory (env LOCAL_CLUSTER_STATE_DIR; default {default_dir})"
    p = OneLineParser(prog="local-cluster", description="A loopback Kubernetes pod API whose pods "
                                "are sshd hosts on this machine.")
    p.add_argument("--state-dir", default=default_dir, help=helptext)
    common = OneLineParser(add_help=False)  # --state-dir also after the command
    common.add_argument("--state-dir", default=argparse.SUPPRESS, help=helptext)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def pod_opts(sp):
        sp.add_argument("--slots", type=int, default=env_int(LOCAL_CLUSTER_SLOTS, None, UsageError),
                        help="set the elastic-horovod/slots annotation (env LOCAL_CLUSTER_SLOTS)")
        sp.add_argument("--gpus", type=int, default=0, help="nvidia.com/gpu limit of each pod")

    up = sub.add_parser("up", parents=[common], help="start the cluster (or report the running one)")
    up.add_argument("--workers", type=int, default=env_int(LOCAL_CLUSTER_WORKERS, 2, UsageError),
                    help="worker pods to start (env LOCAL_CLUSTER_WORKERS; default %(default)s)")
    pod_opts(up)
    up.add_argument("--ssh-port", type=int, default=env_int(LOCAL_CLUSTER_SSH_PORT, 2222, UsageError),
                    help="sshd port of every pod (env LOCAL_CLUSTER_SSH_PORT; default %(default)s)")
    up.add_argument("--isolation", choices=["namespaces", "none"],
                    default=os.environ.get(LOCAL_CLUSTER_ISOLATION) or "namespaces",
                    help="namespaces (root: own hostname and /data) or none (env LOCAL_CLUSTER_ISOLATION)")
    up.add_argument("--runtime", choices=["processes", "containers"],
                    default=os.environ.get(LOCAL_CLUSTER_RUNTIME) or "processes",
                    help="processes (the host's sshd; default) or containers of --image (env LOCAL_CLUSTER_RUNTIME)")
    up.add_argument("--image", default=os.environ.get(LOCAL_CLUSTER_IMAGE) or None,
                    help="worker image of --runtime containers, e.g. elastic-horovod:0.1.0 (env LOCAL_CLUSTER_IMAGE)")
    up.add_argument("--shared-dir", action="append", default=[], metavar="DIR",
                    help="with --runtime containers: a host directory mounted at the same path in every pod "
                         "(like a ReadWriteMany volume; repeatable)")
    up.add_argument("--capacity", type=int, default=0, metavar="N",
                    help="most pods the node runs at once, as a capped pool: the rest stay Pending "
                         "(default 0: no limit)")
    up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for Ready pods")
    sub.add_parser("down", parents=[common], help="stop the cluster and every pod process")
    st = sub.add_parser("status", parents=[common], help="show the cluster and its pods")
    st.add_argument("--json", action="store_true", help="print JSON")
    sc = sub.add_parser("scale", parents=[common], help="make the number of worker pods N")
    sc.add_argument("count", type=int)
    pod_opts(sc)
    sc.add_argument("--timeout", type=float, default=120.0)
    ad = sub.add_parser("add-pod", parents=[common], help="add one worker pod")
    ad.add_argument("--name", help="pod name (default: the next free worker-<n>)")
    pod_opts(ad)
    ad.add_argument("--timeout", type=float, default=120.0)
    fa = sub.add_parser("fault", parents=[common], help="inject an API fault (for trying clients' resilience)")
    fa.add_argument("kind", choices=["restart-api", "drop-watches", "compact", "latency"],
                    help="restart-api: go away for --seconds keeping state; drop-watches: cut open watches; "
                         "compact: forget history (watches from older resourceVersions get 410); "
                         "latency: delay every request by --seconds (0 to stop)")
    fa.add_argument("--seconds", type=float, default=0.0)
    dp = sub.add_parser("delete-pod", parents=[common], help="delete a pod (graceful)")
    dp.add_argument("name")
    dp.add_argument("--grace", type=int, default=None, help="grace period in seconds")
    dp.add_argument("--namespace", default="default")
    return p


def _running(paths: StatePaths) -> dict:
    state = control.running_state(paths)
    if state is None:
        raise LocalClusterError(f"no cluster is running with state dir {paths.root} (start one: local-cluster up)")
    return state


def _print_status(info: dict) -> None:
    print(f"api:        {info['api']}")
    print(f"kubeconfig: {info['kubeconfig']}   (kubectl --kubeconfig {info['kubeconfig']} get pods)")
    print(f"identity:   {info['identity']}")
    print(f"ssh port:   {info['ssh_port']}")
    print(f"{'NAME':<20} {'PHASE':<10} {'READY':<6} {'IP':<16} UID")
    for p in info["pods"]:
        name = p["name"] if p["namespace"] == "default" else f"{p['namespace']}/{p['name']}"
        print(f"{name:<20} {p['phase'] or '-':<10} {str(p['ready']).lower():<6} {p['ip'] or '-':<16} {p['uid']}")


def _runtime_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with ``up``'s --runtime/--image/--shared-dir, or None."""
    if args.runtime == "containers" and not args.image:
        return "--runtime containers needs --image IMAGE (scripts/build-images builds it)"
    if args.runtime == "processes" and (args.image or args.shared_dir):
        return "--image and --shared-dir are only for --runtime containers"
    for d in args.shared_dir:
        if not os.path.isdir(d) or ":" in d:
            return f"--shared-dir {d!r} is not a directory (or contains ':')"
    return None


def run(args: argparse.Namespace) -> int:
    paths = StatePaths(Path(os.path.abspath(os.path.expanduser(args.state_dir))))
    if args.command == "up":
        if args.workers < 0:
            raise UsageError(f"--workers must be >= 0, got {args.workers}")
        if args.capacity < 0:
            raise UsageError(f"--capacity must be >= 0, got {args.capacity}")
        problem = _runtime_problem(args)
        if problem:
            raise UsageError(problem)
        state, started = control.start(paths, ssh_port=args.ssh_port, isolation=args.isolation,
                                       runtime=args.runtime, image=args.image, shared_dirs=args.shared_dir,
                                       capacity=args.capacity)
        if started:
            created, _ = control.scale(state, args.workers, args.slots, args.gpus)
            control.wait_ready(state, created, args.timeout)
        else:
            print(f"local-cluster: a cluster is already running (pid {state['pid']}); not starting another",
                  file=sys.stderr)
        _print_status(control.status(state))
        print(f"\nexport KUBECONFIG={state['kubeconfig']}")
        return EXIT_OK
    if args.command == "down":
        if not control.stop(paths):
            print(f"local-cluster: no cluster was running with state dir {paths.root}", file=sys.stderr)
        return EXIT_OK
    if args.command == "fault" and args.seconds < 0:  # bad input before looking for the cluster
        raise UsageError(f"--seconds must be >= 0, got {args.seconds}")
    state = _running(paths)
    if args.command == "status":
        info = control.status(state)
        if args.json:
            print(json.dumps(info, indent=2))
        else:
            _print_status(info)
    elif args.command == "scale":
        created, deleted = control.scale(state, args.count, args.slots, args.gpus)
        control.wait_ready(state, created, args.timeout)
        print(f"created: {' '.join(created) or '-'}; deleting: {' '.join(deleted) or '-'}")
    elif args.command == "add-pod":
        pod = control.add_pod(state, args.name, args.slots, args.gpus)
        ips = control.wait_ready(state, [pod["metadata"]["name"]], args.timeout)
        print(f"{pod['metadata']['name']} {ips[pod['metadata']['name']]}")
    elif args.command == "fault":
        query = {"restart-api": {"down": args.seconds}, "latency": {"seconds": args.seconds}}.get(args.kind, {})
        print(json.dumps(control.admin(state, args.kind, **query)))
    elif args.command == "delete-pod":
        control.client(state).delete_pod(args.name, args.namespace, args.grace)
        print(f"{args.name} deleting")
    return EXIT_OK


def main(argv=None) -> int:
    """Entry point of ``local-cluster``; returns the exit code."""
    return run_main("local-cluster", lambda: run(build_parser().parse_args(argv)),
                    usage=UsageError, failure=LocalClusterError)


if __name__ == "__main__":
    sys.exit(main())
