-- Debounce of jobs: per job and key, the message of the last enqueue. Every enqueue of a key
-- sends its message due `period` later (and no later than `maxWait` after the window's first)
-- and makes itself the key's last; a delivery runs only if it is still the last (the row is then
-- removed, closing the window), so a burst of enqueues runs once, with the last payload.
CREATE TABLE {{schema}}.job_debounce (
  job text NOT NULL,
  key text NOT NULL,
  queue text NOT NULL,
  msg_id bigint NOT NULL,
  first_at timestamptz NOT NULL,
  PRIMARY KEY (job, key)
);
