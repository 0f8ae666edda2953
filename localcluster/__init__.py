"""A loopback Kubernetes pod API whose pods are sshd hosts on this machine (see README.md)."""
