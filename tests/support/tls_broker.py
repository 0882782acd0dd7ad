"""A Kafka broker that speaks only TLS, for tests of hubstream's Kafka security settings.

A Tansu broker of its own listens in plaintext on a loopback port nobody is told of; stunnel
terminates TLS on a second port and forwards to it, and the broker advertises the TLS port, so
every connection a client makes (bootstrap and the broker it is sent to) is TLS. The CA and the
server certificate (for `localhost` and 127.0.0.1) are made with openssl for each use.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.ports import free_port
from tests.support.spawn import spawn_logged, stop_processes
from tests.support.tansu import start_tansu
from tests.support.waiting import wait_until

__all__ = ["TlsBroker", "self_signed", "tls_broker"]

STUNNEL = "/usr/bin/stunnel4"


@dataclass(frozen=True)
class TlsBroker:
    bootstrap: str  # the TLS port: the only one a client is given or advertised
    ca: Path  # the CA that signed the broker's certificate

    def client_env(self) -> dict[str, str]:
        """The environment of a hubstream process that connects to this broker."""
        return {
            "KAFKA_BOOTSTRAP": self.bootstrap,
            "KAFKA_BROKER_KIND": "embedded",  # Tansu answers as the embedded broker does
            "KAFKA_SECURITY_PROTOCOL": "SSL",
            "KAFKA_SSL_CA_LOCATION": str(self.ca),
        }


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for CN=`name` and its key, as `name`.pem and `name`.key in `folder`
    (a CA of its own, or a client or server certificate that names itself)."""
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        f"/CN={name}",
        "-keyout",
        str(key),
        "-out",
        str(cert),
        cwd=folder,
    )
    return cert, key


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key), the server's valid for localhost/127.0.0.1."""
    self_signed(folder, "ca")
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        cwd=folder,
    )
    (folder / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "server.pem",
        cwd=folder,
    )
    return folder / "ca.pem", folder / "server.pem", folder / "server.key"


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def tls_broker(folder: Path) -> Iterator[TlsBroker]:
    """A broker behind TLS, its files and logs in `folder`; AssertionError when stunnel is missing
    (`make install` installs it)."""
    assert shutil.which(STUNNEL), f"{STUNNEL} is missing: run `make install`"
    folder.mkdir(parents=True, exist_ok=True)
    ca, cert, key = _certificates(folder)
    plain, tls = free_port(), free_port()
    (folder / "stunnel.conf").write_text(
        f"foreground = yes\npid =\n[kafka]\naccept = 127.0.0.1:{tls}\nconnect = 127.0.0.1:{plain}\n"
        f"cert = {cert}\nkey = {key}\n"
    )
    broker = start_tansu(f"127.0.0.1:{plain}", f"127.0.0.1:{tls}", folder / "broker.log")
    tunnel = spawn_logged([STUNNEL, str(folder / "stunnel.conf")], folder / "stunnel.log")
    try:
        wait_until(lambda: _answers(plain) and _answers(tls), 30, "the broker and its TLS port")
        yield TlsBroker(f"127.0.0.1:{tls}", ca)
    finally:
        stop_processes(tunnel, broker, grace_s=10)
