"""``elastic-run``: the launcher that wires discovery, SSH, the dataset and horovodrun together,
the prepare hook the discovery daemon runs per new pod, and the timeline printed at the end.

The top of the room: may import ``elastic.ssh``, ``elastic.sync``, ``elastic.common`` and
``elastic.errors``; nothing in ``elastic`` imports it. Runs the other commands as processes.
"""
