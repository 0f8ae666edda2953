"""The runtime around horovodrun: everything between "pods are Ready" and "workers train".

Rooms: ``ssh/`` (per-job keys, pinned host keys, ssh_config, ``ssh-bootstrap``), ``sync/``
(``dataset-sync``: manifest, transports, lock), ``launch/`` (``elastic-run``: the daemon it
starts, the prepare hook, the horovodrun command, the timeline), ``common/`` (helpers the
rooms share) and ``errors`` (the package's one error tree). Imports ``common`` and
``errors`` freely; never imports ``discovery``, ``training`` or ``localcluster``.
"""
