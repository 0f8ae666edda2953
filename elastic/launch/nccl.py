"""NCCL settings the launcher gives every training process unless the user set them.

Between nodes, NCCL's collectives go over RDMA when the pod can see RDMA devices (InfiniBand,
RoCE, or a plugin such as aws-ofi-nccl for EFA or GPUDirect-TCPX), and otherwise over TCP on
the pod network, whose ``eth0`` inside the pod is a virtual interface. Over TCP, NCCL's socket
transport opens one socket per connection served by one helper thread unless it recognises
the NIC (it raises both on AWS's ENA and Google's gVNIC): one TCP flow, bounded by one core
and one queue of the (virtual) NIC, typically 10-25 Gbit/s of a 100-200 Gbit/s node.

- ``NCCL_SOCKET_NTHREADS=4`` and ``NCCL_NSOCKS_PERTHREAD=4``: 16 flows per connection,
  spread over the NIC's queues and the network's equal-cost paths (NCCL allows a product of
  at most 64). It costs the helper threads' CPU while data moves. Safe everywhere: the RDMA
  transports and the network plugins do not read them.
- ``NCCL_DEBUG=WARN``: NCCL names the cause when it fails (an interface it cannot use, a peer
  it cannot reach) instead of failing with a bare error code.

Not set here: ``NCCL_SOCKET_IFNAME`` (horovodrun sets it from ``--network-interface``), the
fabric's own settings (``NCCL_IB_*``, ``NCCL_NET*``, ``FI_*``: an overlay for that fabric
sets them) and the topology knobs (``NCCL_P2P_*``, ``NCCL_SHM_*``: NCCL detects the node's
topology inside a pod when ``/dev/shm`` is large enough, which deploy/ makes it).
deploy/README.md ("NCCL across nodes") has the bandwidth to expect and how to measure it.
"""
from __future__ import annotations

from types import MappingProxyType

from elastic.environment import NCCL_DEBUG, NCCL_NSOCKS_PERTHREAD, NCCL_SOCKET_NTHREADS

NCCL_DEFAULTS = MappingProxyType({
    NCCL_SOCKET_NTHREADS: "4",
    NCCL_NSOCKS_PERTHREAD: "4",
    NCCL_DEBUG: "WARN",
})
