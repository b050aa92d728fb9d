-- Event bus: the subscriptions a publisher routes by (pattern -> subscriber queue), the
-- processed-events records of idempotent handlers, and the transactional outbox. Event
-- messages themselves are job messages in the subscriber queues (the queue store's tables).

-- One row per subscriber (handler): registering a handler again rebinds its pattern and queue.
CREATE TABLE {{schema}}.event_subscriptions (
  handler text PRIMARY KEY,
  pattern text NOT NULL CHECK (length(pattern) BETWEEN 1 AND 255),
  queue text NOT NULL CHECK (queue ~ '^[a-z][a-z0-9_]*$'),
  registered_at timestamptz NOT NULL DEFAULT now()
);

-- Two-phase claims of idempotent handlers: inserted pending (completed_at IS NULL) before the
-- handler runs, heartbeated while it runs, stamped completed after. The primary key is the
-- unique (event_id, handler) index that makes a second run of a completed event impossible.
CREATE TABLE {{schema}}.processed_events (
  event_id uuid NOT NULL,
  handler text NOT NULL,
  claimed_by text NOT NULL,
  claimed_at timestamptz NOT NULL,
  heartbeat_at timestamptz NOT NULL,
  completed_at timestamptz,
  PRIMARY KEY (event_id, handler)
);

-- the purge deletes by age: completed records by completion, abandoned claims by last beat
CREATE INDEX processed_events_age_idx ON {{schema}}.processed_events ((coalesce(completed_at, heartbeat_at)));

-- The transactional outbox: written in the app's transaction, relayed to the bus by a poller.
-- In a split deployment this table lives in the app's database (migrate it there too).
CREATE TABLE {{schema}}.outbox_entries (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  kind text NOT NULL CHECK (kind IN ('queue', 'event')),
  queue text,
  routing_key text,
  event_id uuid,
  payload jsonb NOT NULL,
  headers jsonb,
  -- current attributes captured at write time (events)
  context jsonb,
  fair_key text,
  fair_weight double precision,
  -- absolute time the message becomes visible on the bus (null: at once)
  deliver_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  published_at timestamptz,
  attempts integer NOT NULL DEFAULT 0,
  last_error text,
  last_attempt_at timestamptz,
  CHECK ((kind = 'queue') = (queue IS NOT NULL)),
  CHECK ((kind = 'event') = (routing_key IS NOT NULL AND event_id IS NOT NULL))
);

-- the poller's claim: unpublished entries in id order
CREATE INDEX outbox_entries_pending_idx ON {{schema}}.outbox_entries (id) WHERE published_at IS NULL;

-- retention of published entries
CREATE INDEX outbox_entries_published_idx ON {{schema}}.outbox_entries (published_at) WHERE published_at IS NOT NULL;
