#!/bin/sh
# worker-entrypoint: install the job's public key and run sshd in the foreground.
#
# Reads $ELASTIC_SSH_SECRET_DIR/id_ed25519.pub (the Secret `ssh-bootstrap keys` writes),
# keeps this container's host keys (made once per container, so a recreated pod is a new
# host to ssh-bootstrap too), listens on $SSH_PORT. Exits non-zero with one line on stderr
# when the key is missing.
set -eu
secret=${ELASTIC_SSH_SECRET_DIR:-/etc/elastic-horovod/ssh}
port=${SSH_PORT:-2222}
if [ ! -s "$secret/id_ed25519.pub" ]; then
  echo "worker-entrypoint: error: no public key at $secret/id_ed25519.pub (mount the job's SSH Secret)" >&2
  exit 1
fi
umask 077
mkdir -p /root/.ssh /run/sshd
cp "$secret/id_ed25519.pub" /root/.ssh/authorized_keys.tmp
mv /root/.ssh/authorized_keys.tmp /root/.ssh/authorized_keys
ssh-keygen -A >/dev/null
exec /usr/sbin/sshd -D -e -p "$port"
