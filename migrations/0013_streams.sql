-- Streams (SSE): broadcasts live in a queue (see QueueFeed); these tables hold what a queue
-- cannot. stream_trims: per stream, the highest broadcast id its retention deleted, so that a
-- client resuming from an older cursor is told it missed some (a gap). stream_presence: who is
-- on a stream, one row per member (manual join, connection_id '') or per SSE connection (a seat).

CREATE TABLE {{schema}}.stream_trims (
  stream text PRIMARY KEY,
  trimmed_through bigint NOT NULL,
  trimmed_at timestamptz NOT NULL
);

CREATE INDEX stream_trims_trimmed_at_idx ON {{schema}}.stream_trims (trimmed_at);

CREATE TABLE {{schema}}.stream_presence (
  stream text NOT NULL,
  member_id text NOT NULL,
  -- '' for a member joined by hand; a connection's id for a seat of connection-driven presence
  connection_id text NOT NULL DEFAULT '',
  seat text,
  metadata jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(metadata) = 'object'),
  joined_at timestamptz NOT NULL,
  last_seen_at timestamptz NOT NULL,
  ttl_ms bigint NOT NULL CHECK (ttl_ms > 0),
  -- last_seen_at + ttl: past it the member is gone (a dead process's seats expire this way)
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (stream, member_id, connection_id)
);

CREATE INDEX stream_presence_expires_at_idx ON {{schema}}.stream_presence (expires_at);
CREATE INDEX stream_presence_connection_idx ON {{schema}}.stream_presence (connection_id) WHERE connection_id <> '';
