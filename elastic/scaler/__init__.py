"""The Kubernetes controller in the launcher pod: ``python -m elastic.scaler.scale_workers``
sets the job's worker set to its desired size when a launcher starts and to zero when the
launcher Job is over or suspended (deploy/job/launcher.yaml). Talks to the API server through
the official client; imports no other room of ``elastic`` but ``errors``."""
