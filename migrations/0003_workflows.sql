-- Workflows: runs, step attempts, the append-only audit trail. Signals come with their own
-- migration. Status columns are text checked against the transition table's states.

CREATE TABLE {{schema}}.workflow_runs (
  id uuid PRIMARY KEY,
  workflow text NOT NULL,
  subject text,
  resource_id text,
  payload jsonb NOT NULL,
  status text NOT NULL CHECK (status IN ('ready', 'performing', 'waiting', 'paused', 'finished', 'cancelled')),
  current_step text,
  idempotency_key text,
  -- why a paused run is paused: error, manual, stalled, version_mismatch, step_pause
  paused_reason text,
  paused_at timestamptz,
  error jsonb,
  output jsonb,
  engine_version integer NOT NULL,
  definition_version text,
  -- hash of the step names this run has recorded so far, in order
  definition_hash text,
  rerun_of uuid,
  actor text NOT NULL DEFAULT 'app',
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  finished_at timestamptz,
  CHECK ((status IN ('finished', 'cancelled')) = (finished_at IS NOT NULL)),
  CHECK ((status = 'paused') = (paused_at IS NOT NULL))
);

-- one ongoing run per workflow and subject
CREATE UNIQUE INDEX workflow_runs_ongoing_subject_idx ON {{schema}}.workflow_runs (workflow, subject)
  WHERE subject IS NOT NULL AND status IN ('ready', 'performing', 'waiting', 'paused');

-- idempotency keys are unique per workflow
CREATE UNIQUE INDEX workflow_runs_idempotency_key_idx ON {{schema}}.workflow_runs (workflow, idempotency_key)
  WHERE idempotency_key IS NOT NULL;

CREATE INDEX workflow_runs_created_idx ON {{schema}}.workflow_runs (created_at DESC, id DESC);
CREATE INDEX workflow_runs_status_idx ON {{schema}}.workflow_runs (status, created_at DESC);
CREATE INDEX workflow_runs_resource_idx ON {{schema}}.workflow_runs (resource_id, created_at DESC) WHERE resource_id IS NOT NULL;
CREATE INDEX workflow_runs_finished_idx ON {{schema}}.workflow_runs (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE {{schema}}.workflow_steps (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  run_id uuid NOT NULL REFERENCES {{schema}}.workflow_runs (id) ON DELETE CASCADE,
  name text NOT NULL,
  attempt integer NOT NULL CHECK (attempt >= 1),
  -- order of the step in the run's history (its first attempt's turn)
  position integer NOT NULL CHECK (position >= 0),
  status text NOT NULL CHECK (status IN ('scheduled', 'waiting', 'in_progress', 'completed', 'failed', 'cancelled', 'skipped')),
  queue text NOT NULL,
  scheduled_at timestamptz NOT NULL,
  due_at timestamptz NOT NULL,
  started_at timestamptz,
  finished_at timestamptz,
  timeout_ms double precision,
  -- consecutive reattempts of this step, this attempt included (for max_reattempts)
  reattempts integer NOT NULL DEFAULT 0,
  worker text,
  app_revision text,
  output jsonb,
  error jsonb,
  UNIQUE (run_id, name, attempt),
  CHECK ((status IN ('completed', 'failed', 'cancelled', 'skipped')) = (finished_at IS NOT NULL))
);

CREATE INDEX workflow_steps_run_idx ON {{schema}}.workflow_steps (run_id, position, attempt);
CREATE INDEX workflow_steps_active_idx ON {{schema}}.workflow_steps (status, due_at)
  WHERE status IN ('scheduled', 'in_progress', 'waiting');

CREATE TABLE {{schema}}.workflow_events (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  run_id uuid NOT NULL REFERENCES {{schema}}.workflow_runs (id) ON DELETE CASCADE,
  type text NOT NULL,
  step text,
  attempt integer,
  actor text NOT NULL,
  reason text,
  details jsonb,
  at timestamptz NOT NULL
);

CREATE INDEX workflow_events_run_idx ON {{schema}}.workflow_events (run_id, id);
