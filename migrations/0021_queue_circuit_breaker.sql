-- The per-queue circuit breaker: a queue whose jobs fail over and over pauses itself (a row of
-- queue_states with actor 'circuit-breaker' and a paused_until), so that every process stops
-- claiming from it. breaker_trips counts the trips in a row: a trip within the longest backoff of
-- the previous pause's end doubles the pause; one after that (or after a manual resume) starts
-- again at the first.
ALTER TABLE {{schema}}.queue_states ADD COLUMN breaker_trips integer NOT NULL DEFAULT 0;
