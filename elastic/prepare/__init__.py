"""The discovery daemon's per-host prepare hook (``python -m elastic.prepare.hook``), one process
per new pod, run by the daemon before it serves the host: pins the host's SSH key, stops the
job's earlier runs there, copies the dataset (``elastic.ssh``, ``elastic.sync``)."""
