#!/bin/sh
# worker-entrypoint: the worker container's main process (under tini, PID 1).
#
#   worker-entrypoint          run the worker (below)
#   worker-entrypoint ready    exit 0 when sshd listens on $SSH_PORT (the readiness probe: reads
#                              /proc/net/tcp{,6}, connects to nothing, so sshd logs nothing)
#
# 1. installs the job's public key from $ELASTIC_SSH_SECRET_DIR/id_ed25519.pub (only the
#    public key need be mounted) as root's authorized_keys;
# 2. makes this pod's own ed25519 host key (the image has none: every pod is a new host to
#    ssh-bootstrap, and nobody who pulls the image holds a worker's key). With
#    ELASTIC_HOST_KEY_DIR (deploy/ mounts a pod-scoped emptyDir there) the key is made there
#    once and reused when the container restarts (OOM kill, failed CUDA check): the daemon
#    pinned it once per pod, and a new key under the same pod would fail strict host-key
#    checking for good. Without it the key is made in the container's own /etc/ssh;
# 3. when the pod was given GPUs (or ELASTIC_REQUIRE_CUDA=1), checks that torch can use CUDA
#    (check-cuda) and exits 1 with one line if it cannot, instead of training on the CPU;
# 4. runs sshd in the foreground on $SSH_PORT (2222), on $SSH_LISTEN_ADDRESS if set;
# 5. on SIGTERM/SIGINT (pod deletion): sends SIGTERM to the job's trainers only
#    (job-processes: the top process of each ssh session's tree, not the DataLoader's
#    forkserver and loading processes, shells or sshd's sessions; each ssh session is its own
#    session and process group, so nothing else would signal them), waits until every job
#    process has exited (the trainers commit and leave within their --term-grace; the pod's
#    grace period must be longer), then stops sshd and exits 143 (130 for SIGINT).
# Errors: one line on stderr, exit 1.
set -eu
secret=${ELASTIC_SSH_SECRET_DIR:-/etc/elastic-horovod/ssh}
port=${SSH_PORT:-2222}
listen=${SSH_LISTEN_ADDRESS:-}
die() { echo "worker-entrypoint: error: $*" >&2; exit 1; }

if [ "${1:-}" = ready ]; then
  hex=$(printf '%04X' "$port")
  exec grep -qE "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:0000 0A " /proc/net/tcp /proc/net/tcp6
fi
[ $# -eq 0 ] || die "unknown argument: $1 (usage: worker-entrypoint [ready])"

[ -s "$secret/id_ed25519.pub" ] || die "no public key at $secret/id_ed25519.pub (mount the job's SSH Secret)"
umask 077
mkdir -p /root/.ssh /run/sshd
cp "$secret/id_ed25519.pub" /root/.ssh/authorized_keys.tmp
mv /root/.ssh/authorized_keys.tmp /root/.ssh/authorized_keys
key=/etc/ssh/ssh_host_ed25519_key
keydir=${ELASTIC_HOST_KEY_DIR:-}
made=$key
if [ -n "$keydir" ]; then
  [ -d "$keydir" ] && [ -w "$keydir" ] || die "ELASTIC_HOST_KEY_DIR=$keydir is not a writable directory"
  made=$keydir/ssh_host_ed25519_key
fi
if [ ! -s "$made" ] || [ ! -s "$made.pub" ]; then
  rm -f "$made.tmp" "$made.tmp.pub"
  ssh-keygen -q -t ed25519 -N '' -C "$(hostname)" -f "$made.tmp" || die "ssh-keygen could not make a host key"
  mv "$made.tmp.pub" "$made.pub"
  mv "$made.tmp" "$made"
fi
if [ "$made" != "$key" ]; then
  # sshd reads /etc/ssh (images/sshd_config); a copy, so the mode is this file's own (0600)
  cp "$made" "$key.tmp" && mv "$key.tmp" "$key" && cp "$made.pub" "$key.pub" || die "cannot copy the host key to /etc/ssh"
fi

require=${ELASTIC_REQUIRE_CUDA:-}
if [ -z "$require" ]; then
  require=0
  for dev in /dev/nvidia[0-9]*; do [ -e "$dev" ] && require=1 && break; done
fi
if [ "$require" = 1 ]; then
  /usr/local/bin/check-cuda || exit 1
fi

set -- /usr/sbin/sshd -D -e -p "$port"
[ -z "$listen" ] || set -- "$@" -o "ListenAddress=$listen"
"$@" &
sshd_pid=$!

signal=
trap 'signal=TERM' TERM
trap 'signal=INT' INT
while [ -z "$signal" ]; do
  if ! kill -0 "$sshd_pid" 2>/dev/null; then
    code=0; wait "$sshd_pid" || code=$?
    die "sshd exited with code $code"
  fi
  wait "$sshd_pid" || true   # returns early when a trapped signal arrives
done

echo "worker-entrypoint: SIG$signal: forwarding SIGTERM to the job's trainers" >&2
/usr/local/bin/job-processes --entrypoint $$ stop || true
kill -TERM "$sshd_pid" 2>/dev/null || true
wait "$sshd_pid" 2>/dev/null || true
[ "$signal" = INT ] && exit 130
exit 143
