"""The main job's MySQL mirror table outlives the embedded broker, whose batch ids start from 1."""

from __future__ import annotations

import pymysql
import pytest

from app.flow.mainjob import MIRROR_TABLE, broker_incarnation, mirror_rows, prepare_mirror
from app.settings import Settings

pytestmark = pytest.mark.integration


def insert_row(settings: Settings, event_id: str, item: str) -> None:
    conn = pymysql.connect(**settings.mysql.connect_args())
    try:
        with conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {MIRROR_TABLE} (id, recipient, origin, message_type, weight, bundleable,"
                " batch_item_id) VALUES (%s, 'r', 'timeseries', 'mt', 1, 1, %s)",
                (event_id, item),
            )
        conn.commit()
    finally:
        conn.close()


def test_another_broker_empties_the_mirror_and_the_same_one_keeps_it(stack: Settings, unique: str) -> None:
    batch = 900_000_000 + int(unique[:6], 16)  # an id no batch of this broker has
    current = broker_incarnation(stack)
    prepare_mirror(stack, current)
    insert_row(stack, f"old-{unique}", f"{batch}:0")
    prepare_mirror(stack, current)
    assert mirror_rows(stack, str(batch)) == 1  # the same broker: its batch ids never repeat
    prepare_mirror(stack, f"{current}:restarted")  # e.g. `stack down`, `stack up`, then a run
    assert mirror_rows(stack, str(batch)) == 0  # that broker's batch `batch` would count it
    prepare_mirror(stack, current)
