#!/bin/sh
# worker-entrypoint: the worker container's main process (under tini, PID 1).
#
# 1. installs the job's public key from $ELASTIC_SSH_SECRET_DIR/id_ed25519.pub (only the
#    public key need be mounted) as root's authorized_keys;
# 2. makes this container's own ed25519 host key (the image has none: every container is a
#    new host to ssh-bootstrap, and nobody who pulls the image holds a worker's key);
# 3. when the pod was given GPUs (or ELASTIC_REQUIRE_CUDA=1), checks that torch can use CUDA
#    (check-cuda) and exits 1 with one line if it cannot, instead of training on the CPU;
# 4. runs sshd in the foreground on $SSH_PORT (2222), on $SSH_LISTEN_ADDRESS if set;
# 5. on SIGTERM/SIGINT (pod deletion): sends SIGTERM to the job's processes (everything
#    started over ssh: each ssh session is its own session and process group, so nothing
#    else would signal them), waits until they have exited (the training processes save and
#    leave within their --term-grace; the pod's grace period must be longer), then stops
#    sshd and exits 143 (130 for SIGINT).
# Errors: one line on stderr, exit 1.
set -eu
secret=${ELASTIC_SSH_SECRET_DIR:-/etc/elastic-horovod/ssh}
port=${SSH_PORT:-2222}
listen=${SSH_LISTEN_ADDRESS:-}
die() { echo "worker-entrypoint: error: $*" >&2; exit 1; }

[ -s "$secret/id_ed25519.pub" ] || die "no public key at $secret/id_ed25519.pub (mount the job's SSH Secret)"
umask 077
mkdir -p /root/.ssh /run/sshd
cp "$secret/id_ed25519.pub" /root/.ssh/authorized_keys.tmp
mv /root/.ssh/authorized_keys.tmp /root/.ssh/authorized_keys
key=/etc/ssh/ssh_host_ed25519_key
if [ ! -s "$key" ]; then
  rm -f "$key.tmp" "$key.tmp.pub"
  ssh-keygen -q -t ed25519 -N '' -C "$(hostname)" -f "$key.tmp" || die "ssh-keygen could not make a host key"
  mv "$key.tmp.pub" "$key.pub"
  mv "$key.tmp" "$key"
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

# the job's processes: every live process but PID 1 (tini), this shell and its own children
# (sshd's listener, the subshell and sleep of this loop); sshd's per-connection processes are
# left to end with their sessions (their output still reaches the launcher while the job saves)
job_processes() {
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    case $pid in 1|$$|$sshd_pid) continue ;; esac
    read -r stat 2>/dev/null <"$dir/stat" || continue
    comm=${stat#*(}; comm=${comm%)*}
    # shellcheck disable=SC2086
    set -- ${stat##*) }   # state ppid ...
    [ "$1" = Z ] || [ "$2" = $$ ] || [ "$comm" = sshd ] && continue
    echo "$pid"
  done
}
echo "worker-entrypoint: SIG$signal: forwarding SIGTERM to the job's processes" >&2
pids=$(job_processes)
[ -z "$pids" ] || kill -TERM $pids 2>/dev/null || true
while [ -n "$(job_processes)" ]; do
  # a process the job started after the first round gets its SIGTERM too
  for pid in $(job_processes); do
    case " $pids " in *" $pid "*) ;; *) kill -TERM "$pid" 2>/dev/null || true; pids="$pids $pid" ;; esac
  done
  sleep 0.2
done
kill -TERM "$sshd_pid" 2>/dev/null || true
wait "$sshd_pid" 2>/dev/null || true
[ "$signal" = INT ] && exit 130
exit 143
