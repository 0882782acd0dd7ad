"""The pipeline's dead-letter topic `hubstream.pipeline.<name>.dlq` (one partition, created with the
other pipeline topics by `ensure_topics`), written with the project's AsyncProducer: a send
returns once the broker confirmed every record."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from app.kafka.producing import AsyncProducer
from app.pipeline.tolerance import DeadLetter

__all__ = ["KafkaDeadLetters"]


class KafkaDeadLetters:
    def __init__(self, producer: AsyncProducer, topic: str) -> None:
        self.producer = producer
        self.topic = topic

    async def send(self, letters: Sequence[DeadLetter]) -> None:
        """Produced in order; raises the first failure (ProduceFailed, RecordRefused) once all settled."""
        results = await asyncio.gather(
            *(self.producer.send(self.topic, 0, d.key, d.value, d.headers) for d in letters),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def close(self) -> None:
        await self.producer.close()
