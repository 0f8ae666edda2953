"""The embedded stand-in for a Kubernetes cluster on one machine: a loopback pod API (enough
of it for the official client and kubectl), a kubelet whose pods are isolated local sshd
hosts, fault injection and the demo's chaos schedule. See README.md.

Never imports ``discovery``, ``elastic`` or ``training``: it is what they are tested against.
"""
