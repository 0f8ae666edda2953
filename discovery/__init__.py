"""discovery: which pods are Horovod hosts, served fast and safely.

Layers (commands -> services -> adapters -> pure model):

- ``discovery.cli``             the ``discovery-daemon`` command
- ``discovery.discover_hosts``  the ``discover-hosts`` command (standard library only)
- ``discovery.discover_api``    its ``--fallback api`` (standard library; PyYAML for a YAML kubeconfig)
- ``discovery.service``         wires the watch, admission, snapshot publishing, hostfile
- ``discovery.server``          aiohttp endpoints over the current ``HostTable``
- ``discovery.source``          the ``HostSource`` contract the service takes (no Kubernetes import)
- ``discovery.kube_source``     the default source: the API server's pods (``discovery.watch``)
- ``discovery.file_source``     a fixed set of pods from a JSON file (``--pods-file``)
- ``discovery.watch``           list + watch through the official ``kubernetes`` client
- ``discovery.status``          ``WatchStatus``: how current a source's pods are
- ``discovery.admission``       ``--prepare-cmd`` once per pod uid before a host is served
- ``discovery.hostfile``        atomic ``host slots=N`` file
- ``discovery.cache``           pod cache: events, relist diff, changes drained by the publisher
- ``discovery.table``           the immutable ``HostTable``; pure full and incremental builders
- ``discovery.hosts``           the pure pods -> hosts rule (standard library only)
- ``discovery.errors``          the package's error tree (imports nothing; the client's errors too)

This module imports nothing: ``discover-hosts`` runs once a second and must start fast.
"""
