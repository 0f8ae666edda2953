"""SSH between the launcher and its workers: per-job keys, pinned host keys, ssh_config, the
hostfile, connectivity checks, and the ``ssh-bootstrap`` command.

Imports ``elastic.common`` and ``elastic.errors``; never ``elastic.sync`` or ``elastic.launch``.
"""
