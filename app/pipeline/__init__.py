"""At-least-once pipelines (the Transporter design, Compose Transporter on Kafka).

Pure domain: `model` (messages, log entries), `chain` (namespace filters and transforms),
`offsets` (per-writer offset and replay rules), `definition` (loading a pipeline),
`engine` (the run loop over ports). Adapters: `kafka_log`, `readers`, `writers`, `state`.
"""
