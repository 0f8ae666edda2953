"""``dataset-sync``: a dataset copied to many hosts, incremental, verified against a manifest,
published atomically; rsync and SFTP transports, the per-host lock, retries and progress.

Imports ``elastic.ssh`` (to run commands on hosts), ``elastic.common`` and ``elastic.errors``;
never ``elastic.launch``.
"""
