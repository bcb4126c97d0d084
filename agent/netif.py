"""A network interface's IPv4 address, for the Slurm RM's `rendezvous_network_interface`.

The launcher of a gang's chief node posts this address to the master's rendezvous, so every
node's workers reach the torch.distributed store (and NCCL/Gloo their peers) over the network
the cluster's admin chose, not whichever route leads to the master.
"""

from __future__ import annotations

import fcntl
import socket
import struct

_SIOCGIFADDR = 0x8915  # Linux: the interface's (first) IPv4 address
IFNAMSIZ = 16  # with its NUL


def interface_ipv4(name: str) -> str | None:
    """The IPv4 address of interface `name` on this host; None when there is no such interface
    or it has no IPv4 address."""
    raw = name.encode()
    if not raw or len(raw) >= IFNAMSIZ or b"\0" in raw:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            reply = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", raw))
        except OSError:
            return None
    return socket.inet_ntoa(reply[20:24])


def rendezvous_env(interface: str, address: str) -> dict[str, str]:
    """What the task gets for the chosen interface: the address its launcher posts to the
    rendezvous (harness/launch/_spawn.py), and the interface for NCCL's and Gloo's sockets."""
    return {
        "DET_RENDEZVOUS_ADDR": address,
        "NCCL_SOCKET_IFNAME": interface,
        "GLOO_SOCKET_IFNAME": interface,
    }
