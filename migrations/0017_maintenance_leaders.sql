-- One leader per maintenance role (the dispatcher's sweeps, the recurring scheduler): each
-- supervisor competes with a session advisory lock on a connection it reserves for that
-- (pg_try_advisory_lock(hashtext(schema), lock_id)); the winner writes this row. The lock, not the
-- row, is the truth: a row whose backend no longer holds the lock (pg_locks) names a past leader.
CREATE TABLE {{schema}}.maintenance_leaders (
  role text PRIMARY KEY,
  lock_id integer NOT NULL,
  process_id text NOT NULL,
  -- the leader's host and pid, so that who leads is read without the processes table
  host text NOT NULL,
  pid integer NOT NULL,
  backend_pid integer NOT NULL,
  acquired_at timestamptz NOT NULL
);
