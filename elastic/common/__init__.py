"""Helpers every room of ``elastic`` shares: the CLI runner, atomic files, host lists, tables.

Pure or nearly so; imports only ``elastic.errors`` and the standard library, never
``elastic.ssh``, ``elastic.sync`` or ``elastic.launch``.
"""
