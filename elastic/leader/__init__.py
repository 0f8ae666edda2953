"""The leader election of a job's launchers (``elastic-run --leader-election``): one
``coordination.k8s.io/v1`` Lease in the job's namespace, a pure core of the timing rules
(``rules``) and its I/O through the official client (``elector``). Imports no other room of
``elastic``; the launcher (``elastic.launch``) uses it, and fences itself with it
(``elastic.launch.fencing``)."""
