"""Several hosts on one machine, for tests of what crosses a network: each host a network namespace
with its own address on a bridge of the test's own. The root namespace (where the test and the
services it starts itself run) is on the bridge too, at the `gateway` address.

Only names and a /24 subnet that this module makes are touched, and all of them are removed at the
end. Needs root and iproute2 (`ip netns`), as the machines this project is tested on have.
"""

from __future__ import annotations

import ipaddress
import secrets
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["Host", "Lan", "lan"]


@dataclass(frozen=True)
class Host:
    netns: str
    address: str
    link: str  # the bridge's end of the host's veth pair: set down, the host is cut off

    def cut(self) -> None:
        """Take the host off the network (its processes keep running, unreachable)."""
        _ip("link", "set", self.link, "down")

    def restore(self) -> None:
        _ip("link", "set", self.link, "up")

    def argv(self, argv: Sequence[str]) -> list[str]:
        """`argv` run on this host (`ip netns exec` execs it: its pid is the process's own)."""
        return ["ip", "netns", "exec", self.netns, *argv]


@dataclass(frozen=True)
class Lan:
    gateway: str  # the root namespace's address on the bridge
    hosts: tuple[Host, ...]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _free_subnet() -> str:
    """A 10.213.N.0/24 that no interface of this machine is on."""
    shown = subprocess.run(["ip", "-4", "-o", "addr"], check=True, capture_output=True, text=True).stdout
    taken = {
        ipaddress.ip_interface(word).network
        for line in shown.splitlines()
        for word in line.split()
        if "/" in word
    }
    for n in range(1 + secrets.randbelow(200), 255):
        subnet = ipaddress.ip_network(f"10.213.{n}.0/24")
        if not any(subnet.overlaps(net) for net in taken):
            return f"10.213.{n}"
    raise AssertionError("no free 10.213.N.0/24 subnet for the test's hosts")


@contextmanager
def lan(count: int) -> Iterator[Lan]:
    token = secrets.token_hex(3)
    prefix, bridge = _free_subnet(), f"hsb{token}"
    hosts = tuple(Host(f"hs{token}-{i}", f"{prefix}.{i + 2}", f"hsv{token}{i}") for i in range(count))
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{prefix}.1/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for i, host in enumerate(hosts):
            outside, inside = host.link, f"hsp{token}{i}"
            _ip("netns", "add", host.netns)
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", host.netns)
            _ip("link", "set", outside, "master", bridge, "up")
            _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", inside)
            _ip("-n", host.netns, "link", "set", inside, "up")
            _ip("-n", host.netns, "link", "set", "lo", "up")
        yield Lan(f"{prefix}.1", hosts)
    finally:
        for host in hosts:  # a namespace's veth end goes with it, and the bridge's end with that
            subprocess.run(["ip", "netns", "del", host.netns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=30)
