"""``elastic-run``: the launcher process. It wires discovery, SSH, the dataset and horovodrun
together, watches the job, and prints the timeline at the end.

The top of the rooms: may import every other room of ``elastic`` (it builds their command
lines); nothing in ``elastic`` imports it. Runs the other processes (the discovery daemon with
its prepare hook, horovodrun through ``elastic.driver.hvdrun``) as children.
"""
