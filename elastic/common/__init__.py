"""Helpers every room of ``elastic`` shares, whichever process it runs in: the CLI runner,
atomic files, host lists, tables, tied child processes, finding the project's commands
(``tools``), and stopping a job's leftover processes on its hosts (``reap``: run by the
launcher, by horovodrun's driver and by the prepare hook).

Pure or nearly so; imports only ``elastic.errors``, ``shared`` and the standard library, never
another room of ``elastic``.
"""
