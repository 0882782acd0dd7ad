"""The sample generator makes what it says: N rows, R recipients, three domains, `invalid` bad rows."""

from __future__ import annotations

from app.dataavailable import DOMAINS, parse
from app.errors import InvalidInput
from spark_ingest.sample import SampleSpec, recipient_ids, sample_rows


def _valid(row: dict[str, object]) -> bool:
    try:
        parse({**row, "id": "00000000-0000-0000-0000-000000000001"})
    except InvalidInput:
        return False
    return True


def test_sample_counts_domains_weights_and_defects() -> None:
    spec = SampleSpec(rows=3000, recipients=50, invalid=25, seed=3)
    rows = list(sample_rows(spec))
    assert len(rows) == spec.rows
    assert sum(not _valid(r) for r in rows) == spec.invalid
    good = [r for r in rows if _valid(r)]
    assert {r["origin"] for r in good} == set(DOMAINS)
    assert {r["recipient"] for r in good} <= set(recipient_ids(spec.recipients))
    assert all(1024 <= r["weight"] <= 1024 * 1024 for r in good)
    assert rows == list(sample_rows(spec))
