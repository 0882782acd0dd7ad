"""Subscriptions (the Varadhi design): a composite topic delivered to an endpoint with retry and dead-letter
queues that keep per-group order, sharded over the workers."""
