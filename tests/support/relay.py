"""A TCP relay for tests of several hosts: `python -m tests.support.relay LISTEN_HOST LISTEN_PORT
TARGET_HOST TARGET_PORT` accepts connections and pipes each, both ways, to the target.

The embedded Cosmos endpoint serves plain HTTP on loopback only, so workers on other hosts (network
namespaces, tests/support/hosts.py) reach it through two relays: one in each worker's namespace on
that namespace's loopback, which connects across the test's network to a second on the root
namespace's bridge address, which connects to the endpoint. The workers' own settings stay those
of the embedded stack, and their Cosmos traffic crosses the link a test cuts."""

from __future__ import annotations

import asyncio
import contextlib
import sys

__all__ = ["relay_argv"]


def relay_argv(python: str, listen: tuple[str, int], target: tuple[str, int]) -> list[str]:
    return [python, "-m", "tests.support.relay", listen[0], str(listen[1]), target[0], str(target[1])]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


async def _serve(listen_host: str, listen_port: int, target_host: str, target_port: int) -> None:
    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            target_reader, target_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:
            client_writer.close()  # the target is unreachable (a cut link): the client sees a reset
            return
        await asyncio.gather(_pipe(client_reader, target_writer), _pipe(target_reader, client_writer))

    server = await asyncio.start_server(handle, listen_host, listen_port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    host, port, to_host, to_port = sys.argv[1:5]
    asyncio.run(_serve(host, int(port), to_host, int(to_port)))
