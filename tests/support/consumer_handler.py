"""A handler for library-consumer copies run as processes (`hubstream consumer run
tests.support.consumer_handler:handle`): records `key seq attempt pid time_ns` per successful
call to the file named by HS_TEST_OUT (one O_APPEND write per line survives a kill -9 of the
writer), fails transiently for keys k<n> with n % 41 == 0 on their first attempt, and for good
for the second message of keys with n % 97 == 5. HS_TEST_DELAY_S: time each call takes."""

from __future__ import annotations

import asyncio
import functools
import os
import time

from app.consumer import Message, PermanentError, RetriableError


@functools.cache
def _out() -> int:
    return os.open(os.environ["HS_TEST_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def transient(key: str) -> bool:
    return int(key[1:]) % 41 == 0


def permanent(key: str, seq: int) -> bool:
    return int(key[1:]) % 97 == 5 and seq == 1


async def handle(message: Message) -> None:
    key, seq_text = (message.value or b"").decode().split(":")
    seq = int(seq_text)
    await asyncio.sleep(float(os.environ.get("HS_TEST_DELAY_S", "0.01")))
    if transient(key) and message.attempt == 1:
        raise RetriableError("try later")
    if permanent(key, seq):
        raise PermanentError("never")
    os.write(_out(), f"{key} {seq} {message.attempt} {os.getpid()} {time.time_ns()}\n".encode())
