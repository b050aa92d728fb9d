/**
 * Every SQL statement on queue tables: the registry (`<schema>.queues`) and each queue's
 * message table `q_<queue>` and archive `a_<queue>`. Nothing else in the code base touches
 * them. Queue names reach this module validated (see `QueueName.ts`); they are still bound
 * as quoted identifiers, never spliced as text.
 *
 * Time: every statement takes `$now` and uses `coalesce($now, now())`, so production uses the
 * database's clock and tests can bind TestClock's.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import { Result } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import { READ_COUNT_LIMIT } from "./Message.ts"

/** A message row as stored. */
export interface MessageRow {
  readonly msg_id: bigint
  readonly read_ct: number
  readonly enqueued_at: Date
  readonly vt: Date
  readonly message: unknown
  readonly headers: unknown
  readonly last_error: unknown
}

/**
 * Builds CTEs that insert messages into a queue from another module's statement
 * (`messageSendCtes`; see there for `claim` and `claimed`).
 */
export type MessageCtes = (
  physical: string,
  name: string,
  rows: Statement.Fragment,
  now: Date | null,
  claim?: { readonly claimedBy: string; readonly visibilityMs: number }
) => {
  readonly ctes: Statement.Fragment
  readonly notifyRef: Statement.Fragment
  readonly claimed: Statement.Fragment
}

/** A message inserted claimed by `messageSendCtes` (its `claimed` columns; all null when none was sent). */
export interface ClaimedMessageRow {
  readonly claimed_msg_id: bigint | null
  readonly claimed_read_ct?: number | null
  readonly claimed_enqueued_at?: Date | null
  readonly claimed_vt?: Date | null
  readonly claimed_message?: unknown
  readonly claimed_headers?: unknown
}

/** An archived row. */
export interface ArchivedRow {
  readonly msg_id: bigint
  readonly read_ct: number
  readonly enqueued_at: Date
  readonly archived_at: Date
  readonly message: unknown
  readonly headers: unknown
}

/** A message row of the fair read, with its key, weight and start tag (see `FairShare.ts`). */
export interface FairMessageRow extends MessageRow {
  readonly fair_key: string
  readonly fair_weight: number
  readonly fair_start: number
}

/** A fair index's catalog state: whether it is valid, and whether a build of it is running now. */
export interface IndexStateRow {
  readonly valid: boolean
  readonly building: boolean
}

/** A job's rate set at run time. */
export interface RateOverrideRow {
  readonly job: string
  readonly rate_limit: number
  readonly period_ms: number
  readonly actor: string
  readonly reason: string | null
  readonly updated_at: Date
}

/** A queue of the registry. */
export interface QueueRow {
  readonly name: string
  readonly dead_letter_of: string | null
  readonly created_at: Date
}

/** A queue's figures. */
export interface MetricsRow {
  readonly depth: bigint
  readonly visible: bigint
  readonly oldest_age_ms: number | null
  readonly oldest_visible_age_ms: number | null
  readonly archive_size: bigint
}

/** A (msg_id, read_ct) pair: the receipt that guards acknowledgements. */
export interface ReceiptParams {
  readonly ids: ReadonlyArray<bigint>
  readonly readCounts: ReadonlyArray<number>
}

/** One message to insert, its JSON already encoded (its size was checked on that text). */
export interface EncodedMessage {
  readonly message: string
  readonly headers: string | null
  readonly delayMs: number
  readonly at: Date | null
}

const typedArray = (values: ReadonlyArray<unknown>, oid: number): unknown =>
  Result.getOrThrow(PgTypes.array(values, oid))

const NOW = (sql: SqlClient.SqlClient, now: Date | null) => sql`coalesce(${now}::timestamptz, now())`

// A claim's next read count, capped at int4's maximum: a row already there (written by hand,
// or after two billion deliveries) is still claimed, and the worker dead-letters it
// (`read_count_limit`), instead of failing every claim of its queue with "integer out of range".
const READ_COUNT_NEXT_EXPR = `least(q.read_ct, ${READ_COUNT_LIMIT - 1}) + 1`

// `pgbus_dlq_retries` of hand-written headers may be anything: only an integral JSON number in
// int4's range counts, else none (a cast of another value would fail the dead-lettering).
const DLQ_RETRIES_EXPR = `CASE WHEN jsonb_typeof(d.headers -> 'pgbus_dlq_retries') = 'number'
    AND (d.headers ->> 'pgbus_dlq_retries')::numeric BETWEEN 0 AND ${READ_COUNT_LIMIT - 1}
  THEN floor((d.headers ->> 'pgbus_dlq_retries')::numeric)::int4 END`

// The fair-share key of a message, spelled exactly as the fair index's expression, so that the
// planner matches it (a bound parameter would not match).
const FAIR_KEY_EXPR = "COALESCE(message ->> 'pgbus_fair_key', '')"

// A message's weight, clamped to 1..1,000,000; anything but a JSON number (written by hand) is 1.
const FAIR_WEIGHT_EXPR = `CASE WHEN jsonb_typeof(message -> 'pgbus_fair_weight') = 'number'
  THEN least(greatest(floor((message ->> 'pgbus_fair_weight')::numeric), 1), 1000000)::float8 ELSE 1 END`

// A limited message's limit (`t` is its row): at least 1; anything but a JSON number is 1.
const LIMIT_TO_EXPR = `CASE WHEN jsonb_typeof(t.message -> 'pgbus_limit_to') = 'number'
  THEN greatest(floor((t.message ->> 'pgbus_limit_to')::numeric), 1)::int8 ELSE 1 END`

/**
 * Builds the statements for one schema. Each function returns an Effect running one
 * statement (so that it joins the caller's transaction when one is open).
 */
export const makeQueueSql = (sql: SqlClient.SqlClient, schema: string, notifyChannel: string) => {
  const registry = sql(`${schema}.queues`)
  const messages = (physical: string) => sql(`${schema}.q_${physical}`)
  const archive = (physical: string) => sql(`${schema}.a_${physical}`)
  const index = (name: string) => sql(name)

  /** Serialises DDL on one queue across processes (xact-scoped). */
  const queueLockTransaction = (physical: string) =>
    sql`SELECT pg_advisory_xact_lock(hashtext(${`${schema}.queue:${physical}`}))`

  // vacuum_truncate off: a queue table empties from its tail all day, and truncating the empty
  // pages takes an ACCESS EXCLUSIVE lock every claim would queue behind (migration 0022 sets it
  // on queues created before).
  const queueCreateMessageTable = (physical: string) =>
    sql`CREATE TABLE IF NOT EXISTS ${messages(physical)} (
      msg_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      read_ct integer NOT NULL DEFAULT 0,
      enqueued_at timestamptz NOT NULL DEFAULT now(),
      vt timestamptz NOT NULL DEFAULT now(),
      message jsonb NOT NULL,
      headers jsonb,
      claimed_by text,
      last_error jsonb
    ) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0.02,
      fillfactor = 90, vacuum_truncate = false)`

  const queueCreateVisibilityIndex = (physical: string) =>
    sql`CREATE INDEX IF NOT EXISTS ${index(`q_${physical}_vt_idx`)} ON ${messages(physical)} (vt)`

  const queueCreateArchiveTable = (physical: string) =>
    sql`CREATE TABLE IF NOT EXISTS ${archive(physical)} (
      msg_id bigint PRIMARY KEY,
      read_ct integer NOT NULL,
      enqueued_at timestamptz NOT NULL,
      archived_at timestamptz NOT NULL DEFAULT now(),
      vt timestamptz NOT NULL,
      message jsonb NOT NULL,
      headers jsonb
    ) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0)`

  const queueCreateArchiveIndex = (physical: string) =>
    sql`CREATE INDEX IF NOT EXISTS ${index(`a_${physical}_archived_at_idx`)} ON ${archive(physical)} (archived_at)`

  /** The relation names a queue's tables and indexes carry (`q_`, its vt index, `a_`, its archived_at index). */
  const queueRelationNames = (physical: string) => ({
    messages: `q_${physical}`,
    visibilityIndex: `q_${physical}_vt_idx`,
    archive: `a_${physical}`,
    archiveIndex: `a_${physical}_archived_at_idx`
  })

  // What of these queues is already there: relations from the catalog (no lock on any table),
  // registered names from the registry (a plain read). Lets `create` skip its DDL on a queue
  // that exists, whose CREATE INDEX IF NOT EXISTS would lock the live tables in an order a
  // busy worker's archive statement meets the other way (40P01).
  const queueObjectsPresent = (physicals: ReadonlyArray<string>) => {
    const relations = physicals.flatMap((p) => Object.values(queueRelationNames(p)))
    return sql<{
      readonly kind: "relation" | "queue"
      readonly name: string
    }>`SELECT 'relation' AS kind, c.relname AS name
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = ${schema} AND c.relname = ANY(${typedArray(relations, PgTypes.OID.text)}::text[])
      UNION ALL
      SELECT 'queue' AS kind, name FROM ${registry} WHERE name = ANY(${typedArray(physicals, PgTypes.OID.text)}::text[])`
  }

  // Returns the name only when the queue is new (its tables were created just now).
  const queueRegister = (physical: string, deadLetterOf: string | null) =>
    sql<{ readonly name: string }>`INSERT INTO ${registry} (name, dead_letter_of) VALUES (${physical}, ${deadLetterOf})
        ON CONFLICT (name) DO NOTHING RETURNING name`

  // The fair read's index: per key, visible messages oldest first. On a new (empty) queue a
  // plain build; on a served one CONCURRENTLY, which must run outside a transaction.
  const fairIndexName = (physical: string) => `q_${physical}_fair_idx`

  const queueCreateFairIndex = (physical: string) =>
    sql`CREATE INDEX IF NOT EXISTS ${index(fairIndexName(physical))}
        ON ${messages(physical)} ((${sql.literal(FAIR_KEY_EXPR)}), vt, msg_id)`

  const queueCreateFairIndexConcurrently = (physical: string) =>
    sql`CREATE INDEX CONCURRENTLY IF NOT EXISTS ${index(fairIndexName(physical))}
        ON ${messages(physical)} ((${sql.literal(FAIR_KEY_EXPR)}), vt, msg_id)`

  const queueFairIndexState = (physical: string) =>
    sql<IndexStateRow>`SELECT i.indisvalid AS valid,
        EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.index_relid = c.oid) AS building
      FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace
      JOIN pg_index i ON i.indexrelid = c.oid
      WHERE n.nspname = ${schema} AND c.relname = ${fairIndexName(physical)}`

  /** The statement an operator runs to drop an invalid fair index (logged, never run here). */
  const fairIndexDropStatement = (physical: string) =>
    `DROP INDEX CONCURRENTLY IF EXISTS "${schema}"."${fairIndexName(physical)}";`

  const queueDropTables = (physical: string) => sql`DROP TABLE IF EXISTS ${messages(physical)}, ${archive(physical)}`

  const queueUnregister = (physical: string) =>
    sql<{ readonly name: string }>`DELETE FROM ${registry} WHERE name = ${physical} RETURNING name`

  const queueList = () => sql<QueueRow>`SELECT name, dead_letter_of, created_at FROM ${registry} ORDER BY name`

  const queueFind = (physical: string) =>
    sql<QueueRow>`SELECT name, dead_letter_of, created_at FROM ${registry} WHERE name = ${physical}`

  // A wake-up rides in the same statement as the insert, so it is sent at commit and never
  // for a rolled-back send. The uncorrelated sub-select is an InitPlan: one pg_notify per
  // statement, not one per row.
  const notifyFilter = (physical: string) =>
    notifyChannel === "" ? sql`` : sql`WHERE (SELECT true FROM pg_notify(${notifyChannel}, ${physical}))`

  const messageSendOne = (physical: string, m: EncodedMessage, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`WITH m AS (
        INSERT INTO ${messages(physical)} (enqueued_at, vt, message, headers)
        VALUES (${NOW(sql, now)},
                coalesce(${m.at}::timestamptz, ${NOW(sql, now)} + ${PgTypes.float8(m.delayMs)} * interval '1 millisecond'),
                ${m.message}::jsonb, ${m.headers}::jsonb)
        RETURNING msg_id)
      SELECT msg_id FROM m ${notifyFilter(physical)}`

  // Local dispatch of a job: inserted as a read by `claimedBy` would leave it (read_ct 1,
  // invisible for the visibility timeout), with no NOTIFY: no other reader is to wake for it.
  const messageSendOneClaimed = (
    physical: string,
    m: Pick<EncodedMessage, "message" | "headers">,
    claim: { readonly claimedBy: string; readonly visibilityMs: number },
    now: Date | null
  ) =>
    sql<MessageRow>`INSERT INTO ${messages(physical)} (enqueued_at, vt, message, headers, read_ct, claimed_by)
      VALUES (${NOW(sql, now)}, ${NOW(sql, now)} + ${PgTypes.float8(claim.visibilityMs)} * interval '1 millisecond',
              ${m.message}::jsonb, ${m.headers}::jsonb, 1, ${claim.claimedBy})
      RETURNING msg_id, read_ct, enqueued_at, vt, message, headers, last_error`

  const messageSendBatch = (physical: string, batch: ReadonlyArray<EncodedMessage>, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`WITH m AS (
        INSERT INTO ${messages(physical)} (enqueued_at, vt, message, headers)
        SELECT ${NOW(sql, now)},
               coalesce(u.at, ${NOW(sql, now)} + u.delay_ms * interval '1 millisecond'),
               u.message::jsonb, u.headers::jsonb
        FROM unnest(${typedArray(
          batch.map((b) => b.message),
          PgTypes.OID.text
        )}::text[], ${typedArray(
          batch.map((b) => b.headers),
          PgTypes.OID.text
        )}::text[], ${typedArray(
          batch.map((b) => b.delayMs),
          PgTypes.OID.float8
        )}::float8[], ${typedArray(
          batch.map((b) => b.at),
          PgTypes.OID.timestamptz
        )}::timestamptz[]) WITH ORDINALITY AS u(message, headers, delay_ms, at, ord)
        ORDER BY u.ord
        RETURNING msg_id)
      SELECT msg_id FROM m ${notifyFilter(physical)} ORDER BY msg_id`

  // The common batch: one headers value and one schedule for every message (Job.enqueueMany).
  // The messages in one JSON array parameter (no per-element array encoding in the driver, one
  // parse in the server), the ids back as one array (one row to decode instead of one per
  // message).
  const messageSendBatchUniform = (
    physical: string,
    batchJson: string,
    shared: Pick<EncodedMessage, "headers" | "delayMs" | "at">,
    now: Date | null
  ) =>
    sql<{ readonly ids: ReadonlyArray<bigint> }>`WITH m AS (
        INSERT INTO ${messages(physical)} (enqueued_at, vt, message, headers)
        SELECT ${NOW(sql, now)},
               coalesce(${shared.at}::timestamptz, ${NOW(sql, now)} + ${PgTypes.float8(shared.delayMs)} * interval '1 millisecond'),
               u.message, ${shared.headers}::jsonb
        FROM jsonb_array_elements(${batchJson}::jsonb) WITH ORDINALITY AS u(message, ord)
        ORDER BY u.ord
        RETURNING msg_id)
      SELECT coalesce(array_agg(msg_id ORDER BY msg_id), '{}') AS ids FROM m ${notifyFilter(physical)}`

  /**
   * CTEs that send messages from another statement (a workflow transition): `<name>` inserts
   * one message per row of `rows` (which yields `vt` and `message` columns) and
   * `<name>_notify` wakes the queue's readers when at least one was sent. The caller
   * references `notifyRef` in its final SELECT so that the notify CTE runs.
   *
   * With `claim` (local dispatch: `rows` yields one row at most), the message is inserted
   * claimed, as a read by `claimedBy` would leave it (read_ct 1, invisible for `visibilityMs`),
   * with no NOTIFY; the caller selects `claimed` (the `claimed_*` columns of a MessageRow,
   * null when nothing was sent) to hand it to that reader.
   */
  const messageSendCtes: MessageCtes = (physical, name, rows, now, claim) => {
    if (claim !== undefined) {
      const one = (column: string) => sql`(SELECT ${sql(column)} FROM ${sql(name)})`
      const ctes = sql`${sql(name)} AS (
        INSERT INTO ${messages(physical)} (enqueued_at, vt, message, read_ct, claimed_by)
        SELECT ${NOW(sql, now)},
               greatest(src.vt, ${NOW(sql, now)}) + ${PgTypes.float8(claim.visibilityMs)} * interval '1 millisecond',
               src.message, 1, ${claim.claimedBy}
        FROM (${rows}) AS src
        RETURNING msg_id, read_ct, enqueued_at, vt, message, headers)`
      const claimed = sql`${one("msg_id")} AS claimed_msg_id, ${one("read_ct")} AS claimed_read_ct,
        ${one("enqueued_at")} AS claimed_enqueued_at, ${one("vt")} AS claimed_vt,
        ${one("message")} AS claimed_message, ${one("headers")} AS claimed_headers`
      return { ctes, notifyRef: sql`0`, claimed }
    }
    const ctes = sql`${sql(name)} AS (
        INSERT INTO ${messages(physical)} (enqueued_at, vt, message)
        SELECT ${NOW(sql, now)}, greatest(src.vt, ${NOW(sql, now)}), src.message FROM (${rows}) AS src
        RETURNING msg_id)${
          notifyChannel === ""
            ? sql``
            : sql`, ${sql(`${name}_notify`)} AS (
        SELECT pg_notify(${notifyChannel}, ${physical}) FROM (SELECT 1 FROM ${sql(name)} LIMIT 1) AS any_sent)`
        }`
    const notifyRef = notifyChannel === "" ? sql`0` : sql`(SELECT count(*) FROM ${sql(`${name}_notify`)})`
    return { ctes, notifyRef, claimed: sql`NULL::int8 AS claimed_msg_id` }
  }

  /**
   * Like `messageSendCtes`, for a statement that draws the ids first (`messageNextId`) so that
   * another table's row can name its message in the same statement (a uniqueness key): `rows`
   * yields `msg_id`, `vt`, `message` and `headers`; the CTE `<name>` returns the `msg_id`s sent.
   */
  const messageSendWithIdsCtes = (physical: string, name: string, rows: Statement.Fragment, now: Date | null) => {
    const ctes = sql`${sql(name)} AS (
        INSERT INTO ${messages(physical)} (msg_id, enqueued_at, vt, message, headers) OVERRIDING SYSTEM VALUE
        SELECT src.msg_id, ${NOW(sql, now)}, greatest(src.vt, ${NOW(sql, now)}), src.message, src.headers
        FROM (${rows}) AS src
        RETURNING msg_id)${
          notifyChannel === ""
            ? sql``
            : sql`, ${sql(`${name}_notify`)} AS (
        SELECT pg_notify(${notifyChannel}, ${physical}) FROM (SELECT 1 FROM ${sql(name)} LIMIT 1) AS any_sent)`
        }`
    const notifyRef = notifyChannel === "" ? sql`0` : sql`(SELECT count(*) FROM ${sql(`${name}_notify`)})`
    return { ctes, notifyRef }
  }

  /** The next message id of a queue (its identity sequence), for `messageSendWithIdsCtes`. */
  const messageNextId = (physical: string) =>
    sql`nextval(pg_get_serial_sequence(${`"${schema}"."q_${physical}"`}, 'msg_id'))`

  /** Which of `ids` are still in the queue (not archived, deleted or dead-lettered). */
  const messageIdsPresent = (physical: string, ids: ReadonlyArray<bigint>) =>
    sql<{ readonly msg_id: bigint }>`SELECT msg_id FROM ${messages(physical)}
      WHERE msg_id = ANY(${typedArray(ids, PgTypes.OID.int8)}::int8[])`

  const receipts = (r: ReceiptParams) =>
    sql`unnest(${typedArray(r.ids, PgTypes.OID.int8)}::int8[], ${typedArray(r.readCounts, PgTypes.OID.int4)}::int4[]) AS r(msg_id, read_ct)`

  // The rows of `q` that the receipts `r` name. The `= ANY` of the ids makes the table side an
  // index scan of those ids: joined with the unnest alone, from about a hundred receipts on
  // Postgres joined by hashing a sequential scan of the whole queue table (dead rows included),
  // which made every archive-and-claim of W1 at read-ahead 190 scan the backlog.
  const receiptMatch = (r: ReceiptParams) =>
    sql`q.msg_id = ANY(${typedArray(r.ids, PgTypes.OID.int8)}::int8[]) AND q.msg_id = r.msg_id AND q.read_ct = r.read_ct`

  // PGMQ's read: oldest visible first, rows locked by another reader skipped, vt moved on.
  // The claimed rows are updated by id (= ANY of the locked ids), not by a join with the CTE:
  // in the prepared statement's generic plan (the LIMIT unknown) the join was a hash join over
  // a sequential scan of the whole queue table, dead rows included, and Postgres picks that
  // plan when the table is small enough (claims of messages without headers ran about 2x
  // slower). By id it is an index scan in every plan.
  // `from`: the lowest id read (ClaimCursor: a worker's claim starts near its last one, so it
  // does not walk the dead rows of finished jobs that a held snapshot keeps from vacuum).
  const messageRead = (
    physical: string,
    limit: number,
    visibilityMs: number,
    claimedBy: string | null,
    now: Date | null,
    from = 0n
  ) =>
    // one row more than the limit is locked (not claimed): `more` says whether the read left any
    sql<MessageRow & { readonly more: boolean }>`WITH c AS (
        SELECT msg_id FROM ${messages(physical)}
        WHERE msg_id >= ${from} AND vt <= ${NOW(sql, now)}
        ORDER BY msg_id
        LIMIT ${limit + 1}
        FOR UPDATE SKIP LOCKED),
      t AS (SELECT msg_id FROM c ORDER BY msg_id LIMIT ${limit})
      UPDATE ${messages(physical)} q
      SET vt = ${NOW(sql, now)} + ${PgTypes.float8(visibilityMs)} * interval '1 millisecond',
          read_ct = ${sql.literal(READ_COUNT_NEXT_EXPR)},
          claimed_by = ${claimedBy}
      WHERE q.msg_id = ANY(ARRAY(SELECT msg_id FROM t))
      RETURNING q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers, q.last_error,
        (SELECT count(*) FROM c) > ${limit} AS more`

  // The claim of a queue whose jobs carry flow controls. Concurrency limits (`pgbus_limit_key`,
  // at most `pgbus_limit_to` running at once): the messages running now (claimed, their lease
  // `vt` not lapsed) are counted per key, keys at their limit are passed over (their jobs stay
  // visible, parked), and the oldest of the rest are taken, each key up to its free slots. Rate
  // limits (`pgbus_rate_key`, `pgbus_rate_limit` per `pgbus_rate_period_ms`, or the job's row of
  // `rate_overrides`): each key's bucket of the queue is refilled to now and the claim takes at
  // most its whole tokens, then stores what is left, in this one statement. It must run after
  // `queueLockLimits` in the same transaction: the count is then of committed claims only, and
  // no other claim of the queue runs meanwhile (counting in the claim's own snapshot alone would
  // let two concurrent claims both take the last slot or token). The last row is a summary
  // (`msg_id` null): `more`, admissible messages were left behind (parked ones are not news: the
  // end of a run wakes the readers); `wait_ms`, when the next token of a key that had to leave
  // messages behind comes.
  const messageReadLimited = (
    physical: string,
    limit: number,
    visibilityMs: number,
    claimedBy: string | null,
    now: Date | null,
    // the worker's successes, archived first in this statement; they no longer hold a slot
    r: ReceiptParams = { ids: [], readCounts: [] }
  ) => {
    const q = messages(physical)
    const done = sql`${typedArray(r.ids, PgTypes.OID.int8)}::int8[]`
    const buckets = sql(`${schema}.rate_buckets`)
    const overrides = sql(`${schema}.rate_overrides`)
    // the bucket's clock: this statement's start, after the lock was taken (the transaction's
    // `now()` is from before a wait for it); a bucket never goes back in time
    const at = sql`coalesce(${now}::timestamptz, statement_timestamp())`
    return sql<
      MessageRow & { readonly more: boolean | null; readonly wait_ms: number | null; readonly archived: bigint | null }
    >`WITH d AS (
        DELETE FROM ${q} q USING ${receipts(r)}
        WHERE ${receiptMatch(r)}
        RETURNING q.*),
      a AS (
        INSERT INTO ${archive(physical)} (msg_id, read_ct, enqueued_at, archived_at, vt, message, headers)
        SELECT msg_id, read_ct, enqueued_at, ${NOW(sql, now)}, vt, message, headers FROM d
        RETURNING msg_id),
      running AS (
        SELECT message ->> 'pgbus_limit_key' AS k, count(*) AS n
        FROM ${q}
        WHERE vt > ${NOW(sql, now)} AND claimed_by IS NOT NULL AND message ? 'pgbus_limit_key'
          AND msg_id <> ALL(ARRAY(SELECT msg_id FROM d))
        GROUP BY 1),
      cand AS (
        SELECT t.msg_id, t.message ->> 'job' AS job, t.message ->> 'pgbus_limit_key' AS k,
          ${sql.literal(LIMIT_TO_EXPR)} AS lim, t.message ->> 'pgbus_rate_key' AS rk,
          CASE WHEN jsonb_typeof(t.message -> 'pgbus_rate_limit') = 'number'
               THEN greatest((t.message ->> 'pgbus_rate_limit')::float8, 1) ELSE 1 END AS rlim,
          CASE WHEN jsonb_typeof(t.message -> 'pgbus_rate_period_ms') = 'number'
               THEN greatest((t.message ->> 'pgbus_rate_period_ms')::float8, 1) ELSE 1000 END AS rper
        FROM ${q} t
        WHERE t.vt <= ${NOW(sql, now)} AND t.msg_id <> ALL(${done})
          AND NOT EXISTS (
            SELECT 1 FROM running
            WHERE running.k = t.message ->> 'pgbus_limit_key' AND running.n >= ${sql.literal(LIMIT_TO_EXPR)})
        ORDER BY t.msg_id
        LIMIT ${limit * 2 + 64}),
      conc AS (
        SELECT r.* FROM (
          SELECT cand.*, row_number() OVER (PARTITION BY cand.k ORDER BY cand.msg_id) AS rn FROM cand) r
        LEFT JOIN running ON running.k = r.k
        WHERE r.k IS NULL OR coalesce(running.n, 0) + r.rn <= r.lim),
      rates AS (
        SELECT DISTINCT ON (conc.rk) conc.rk, coalesce(o.rate_limit, conc.rlim) AS rl,
          coalesce(o.period_ms, conc.rper) AS rp
        FROM conc LEFT JOIN ${overrides} o ON o.job = conc.job
        WHERE conc.rk IS NOT NULL
        ORDER BY conc.rk, conc.msg_id),
      avail AS (
        SELECT rates.rk, rates.rl, rates.rp,
          least(rates.rl, coalesce(b.tokens + greatest(extract(epoch FROM ${at} - b.refilled_at) * 1000, 0)
            * rates.rl / rates.rp, rates.rl)) AS tokens,
          greatest(b.refilled_at, ${at}) AS refilled_at
        FROM rates LEFT JOIN ${buckets} b ON b.queue = ${physical} AND b.key = rates.rk),
      ok AS (
        SELECT r.msg_id, r.rk FROM (
          SELECT conc.msg_id, conc.rk, row_number() OVER (PARTITION BY conc.rk ORDER BY conc.msg_id) AS rr FROM conc) r
        LEFT JOIN avail a ON a.rk = r.rk
        WHERE r.rk IS NULL OR r.rr <= floor(a.tokens)
        ORDER BY r.msg_id
        LIMIT ${limit + 1}),
      c AS (
        SELECT msg_id FROM ${q}
        WHERE msg_id = ANY(ARRAY(SELECT msg_id FROM ok)) AND vt <= ${NOW(sql, now)}
        ORDER BY msg_id
        LIMIT ${limit}
        FOR UPDATE SKIP LOCKED),
      u AS (
        UPDATE ${q} q
        SET vt = ${NOW(sql, now)} + ${PgTypes.float8(visibilityMs)} * interval '1 millisecond',
            read_ct = q.read_ct + 1,
            claimed_by = ${claimedBy}
        WHERE q.msg_id = ANY(ARRAY(SELECT msg_id FROM c))
        RETURNING q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers, q.last_error,
          q.message ->> 'pgbus_rate_key' AS rk),
      spent AS (
        SELECT a.rk, a.rl, a.rp, a.refilled_at, a.tokens - (SELECT count(*) FROM u WHERE u.rk = a.rk) AS left_tokens,
          (SELECT count(*) FROM conc WHERE conc.rk = a.rk) > (SELECT count(*) FROM u WHERE u.rk = a.rk) AS behind
        FROM avail a),
      b AS (
        INSERT INTO ${buckets} AS bk (queue, key, tokens, refilled_at)
        SELECT ${physical}, spent.rk, spent.left_tokens, spent.refilled_at FROM spent
        ON CONFLICT (queue, key) DO UPDATE SET tokens = excluded.tokens, refilled_at = excluded.refilled_at
        RETURNING 1)
      SELECT msg_id, read_ct, enqueued_at, vt, message, headers, last_error, NULL::bool AS more,
        NULL::float8 AS wait_ms, NULL::int8 AS archived FROM u
      UNION ALL
      SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, (SELECT count(*) FROM ok) > ${limit},
        (SELECT min((1 - spent.left_tokens) * spent.rp / spent.rl) FROM spent
         WHERE spent.behind AND spent.left_tokens < 1), (SELECT count(*) FROM a)`
  }

  /** A job's rate changed at run time (see `messageReadLimited`). */
  const rateOverrideSet = (
    job: string,
    limit: number,
    periodMs: number,
    actor: string,
    reason: string | null,
    now: Date | null
  ) =>
    sql<RateOverrideRow>`INSERT INTO ${sql(`${schema}.rate_overrides`)} AS o (job, rate_limit, period_ms, actor, reason, updated_at)
      VALUES (${job}, ${limit}, ${PgTypes.float8(periodMs)}, ${actor}, ${reason}, ${NOW(sql, now)})
      ON CONFLICT (job) DO UPDATE SET rate_limit = excluded.rate_limit, period_ms = excluded.period_ms,
        actor = excluded.actor, reason = excluded.reason, updated_at = excluded.updated_at
      RETURNING job, rate_limit, period_ms, actor, reason, updated_at`

  /** Back to the definition's rate. */
  const rateOverrideClear = (job: string) =>
    sql<RateOverrideRow>`DELETE FROM ${sql(`${schema}.rate_overrides`)} WHERE job = ${job}
      RETURNING job, rate_limit, period_ms, actor, reason, updated_at`

  const rateOverrideList = () =>
    sql<RateOverrideRow>`SELECT job, rate_limit, period_ms, actor, reason, updated_at
      FROM ${sql(`${schema}.rate_overrides`)} ORDER BY job`

  /**
   * The unfinished messages of concurrency keys in a queue (running, waiting, retrying or
   * scheduled) and the oldest's id: the enqueue-time check of `onConflict: discard | raise`,
   * run under `queueLockLimits`. A scan of the queue.
   */
  const messageLimitCounts = (physical: string, keys: ReadonlyArray<string>) =>
    sql<{
      readonly key: string
      readonly n: bigint
      readonly first: bigint
    }>`SELECT message ->> 'pgbus_limit_key' AS key,
        count(*) AS n, min(msg_id) AS first
      FROM ${messages(physical)}
      WHERE message ->> 'pgbus_limit_key' = ANY(${typedArray(keys, PgTypes.OID.text)}::text[])
      GROUP BY 1`

  /** Serialises the limited claims of one queue across processes (xact-scoped; see messageReadLimited). */
  const queueLockLimits = (physical: string) =>
    sql`SELECT pg_advisory_xact_lock(hashtext(${`${schema}.limits:${physical}`}))`

  /** Wakes a queue's readers (the end of a limited run frees a slot for a parked job). */
  const queueWake = (physical: string) =>
    notifyChannel === "" ? sql`SELECT 1` : sql`SELECT pg_notify(${notifyChannel}, ${physical})`

  // Archives a worker's finished messages and claims the next ones in one statement (one round
  // trip where a flush and a read took two). The claim skips every row the receipts name: a
  // row modified twice in one statement would end in either state.
  const messageArchiveAndRead = (
    physical: string,
    r: ReceiptParams,
    limit: number,
    visibilityMs: number,
    claimedBy: string | null,
    now: Date | null,
    from = 0n
  ) =>
    sql<MessageRow & { readonly archived: bigint | null; readonly more: boolean | null }>`WITH d AS (
        DELETE FROM ${messages(physical)} q USING ${receipts(r)}
        WHERE ${receiptMatch(r)}
        RETURNING q.*),
      a AS (
        INSERT INTO ${archive(physical)} (msg_id, read_ct, enqueued_at, archived_at, vt, message, headers)
        SELECT msg_id, read_ct, enqueued_at, ${NOW(sql, now)}, vt, message, headers FROM d
        RETURNING msg_id),
      c AS (
        SELECT msg_id FROM ${messages(physical)}
        WHERE msg_id >= ${from} AND vt <= ${NOW(sql, now)} AND msg_id <> ALL(${typedArray(r.ids, PgTypes.OID.int8)}::int8[])
        ORDER BY msg_id
        LIMIT ${limit + 1}
        FOR UPDATE SKIP LOCKED),
      t AS (SELECT msg_id FROM c ORDER BY msg_id LIMIT ${limit}),
      u AS (
        UPDATE ${messages(physical)} q
        SET vt = ${NOW(sql, now)} + ${PgTypes.float8(visibilityMs)} * interval '1 millisecond',
            read_ct = ${sql.literal(READ_COUNT_NEXT_EXPR)},
            claimed_by = ${claimedBy}
        WHERE q.msg_id = ANY(ARRAY(SELECT msg_id FROM t))
        RETURNING q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers, q.last_error)
      SELECT msg_id, read_ct, enqueued_at, vt, message, headers, last_error, NULL::int8 AS archived,
        NULL::bool AS more FROM u
      UNION ALL
      SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, (SELECT count(*) FROM a), (SELECT count(*) FROM c) > ${limit}`

  // The fair read (see FairShare.ts): the keys present are found by a skip scan of the fair
  // index (one probe per key); each key with visible messages ranks its `limit` oldest, rank r
  // of weight w starting at credit + (r - 1) / w; the lowest starts are claimed, ties to the
  // oldest, with PGMQ's lock, skip and visibility update. Credits are the reader's memory.
  // Candidates are sorted before the join to the table, so the lock stops at `limit` rows
  // (about 2.5 times faster than sorting after it with 200 keys).
  const messageReadFair = (
    physical: string,
    limit: number,
    visibilityMs: number,
    claimedBy: string | null,
    credits: { readonly keys: ReadonlyArray<string>; readonly credits: ReadonlyArray<number> },
    now: Date | null
  ) => {
    const q = messages(physical)
    const key = sql.literal(FAIR_KEY_EXPR)
    return sql<FairMessageRow>`WITH RECURSIVE keys(k) AS (
        (SELECT ${key} FROM ${q} ORDER BY 1 LIMIT 1)
        UNION ALL
        SELECT (SELECT ${key} FROM ${q} WHERE ${key} > keys.k ORDER BY 1 LIMIT 1)
        FROM keys WHERE keys.k IS NOT NULL),
      heads AS (
        SELECT keys.k, h.w, coalesce(m.credit, 0) AS credit
        FROM keys
        CROSS JOIN LATERAL (
          SELECT ${sql.literal(FAIR_WEIGHT_EXPR)} AS w FROM ${q}
          WHERE ${key} = keys.k AND vt <= ${NOW(sql, now)}
          ORDER BY vt, msg_id LIMIT 1) h
        LEFT JOIN unnest(${typedArray(credits.keys, PgTypes.OID.text)}::text[],
                         ${typedArray(credits.credits, PgTypes.OID.float8)}::float8[]) AS m(k, credit)
          ON m.k = keys.k),
      cand AS (
        SELECT r.msg_id, heads.k, heads.w, heads.credit + (r.rn - 1) / heads.w AS start
        FROM heads
        CROSS JOIN LATERAL (
          SELECT s.msg_id, row_number() OVER (ORDER BY s.vt, s.msg_id) AS rn
          FROM (SELECT msg_id, vt FROM ${q}
                WHERE ${key} = heads.k AND vt <= ${NOW(sql, now)}
                ORDER BY vt, msg_id LIMIT ${limit}) s) r),
      c AS (
        SELECT t.msg_id, cand.k, cand.w, cand.start
        FROM (SELECT * FROM cand ORDER BY start, msg_id) cand JOIN ${q} t ON t.msg_id = cand.msg_id
        WHERE t.vt <= ${NOW(sql, now)}
        ORDER BY cand.start, cand.msg_id
        LIMIT ${limit}
        FOR UPDATE OF t SKIP LOCKED)
      UPDATE ${q} q
      SET vt = ${NOW(sql, now)} + ${PgTypes.float8(visibilityMs)} * interval '1 millisecond',
          read_ct = ${sql.literal(READ_COUNT_NEXT_EXPR)},
          claimed_by = ${claimedBy}
      FROM c WHERE q.msg_id = c.msg_id
      RETURNING q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers, q.last_error,
        c.k AS fair_key, c.w AS fair_weight, c.start AS fair_start`
  }

  const messageArchiveReceipts = (physical: string, r: ReceiptParams, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`WITH d AS (
        DELETE FROM ${messages(physical)} q USING ${receipts(r)}
        WHERE ${receiptMatch(r)}
        RETURNING q.*)
      INSERT INTO ${archive(physical)} (msg_id, read_ct, enqueued_at, archived_at, vt, message, headers)
      SELECT msg_id, read_ct, enqueued_at, ${NOW(sql, now)}, vt, message, headers FROM d
      RETURNING msg_id`

  const messageArchiveIds = (physical: string, ids: ReadonlyArray<bigint>, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`WITH d AS (
        DELETE FROM ${messages(physical)} WHERE msg_id = ANY(${typedArray(ids, PgTypes.OID.int8)}::int8[])
        RETURNING *)
      INSERT INTO ${archive(physical)} (msg_id, read_ct, enqueued_at, archived_at, vt, message, headers)
      SELECT msg_id, read_ct, enqueued_at, ${NOW(sql, now)}, vt, message, headers FROM d
      RETURNING msg_id`

  const messageDeleteReceipts = (physical: string, r: ReceiptParams) =>
    sql<{ readonly msg_id: bigint }>`DELETE FROM ${messages(physical)} q USING ${receipts(r)}
      WHERE ${receiptMatch(r)} RETURNING q.msg_id`

  const messageDeleteIds = (physical: string, ids: ReadonlyArray<bigint>) =>
    sql<{ readonly msg_id: bigint }>`DELETE FROM ${messages(physical)}
      WHERE msg_id = ANY(${typedArray(ids, PgTypes.OID.int8)}::int8[]) RETURNING msg_id`

  const messageSetVisibilityReceipts = (physical: string, r: ReceiptParams, delayMs: number, now: Date | null) =>
    sql<{ readonly msg_id: bigint; readonly vt: Date }>`UPDATE ${messages(physical)} q
      SET vt = ${NOW(sql, now)} + ${PgTypes.float8(delayMs)} * interval '1 millisecond'
      FROM ${receipts(r)}
      WHERE ${receiptMatch(r)}
      RETURNING q.msg_id, q.vt`

  const messageSetVisibilityIds = (physical: string, ids: ReadonlyArray<bigint>, delayMs: number, now: Date | null) =>
    sql<{ readonly msg_id: bigint; readonly vt: Date }>`UPDATE ${messages(physical)}
      SET vt = ${NOW(sql, now)} + ${PgTypes.float8(delayMs)} * interval '1 millisecond'
      WHERE msg_id = ANY(${typedArray(ids, PgTypes.OID.int8)}::int8[])
      RETURNING msg_id, vt`

  const messageReleaseReceipts = (physical: string, r: ReceiptParams, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`UPDATE ${messages(physical)} q
      SET vt = ${NOW(sql, now)}, claimed_by = NULL
      FROM ${receipts(r)}
      WHERE ${receiptMatch(r)}
      RETURNING q.msg_id`

  // Fast recovery: the claims of processes found dead become visible at once. A message whose
  // vt already lapsed, or that a live process re-claimed since, is left alone. A claim's mark is
  // `<process id>#<n>` (a worker's claim or local hand-over, see messageReleaseClaim) or the id alone.
  // Both releases wake the queue's readers when they released any (as a send does).
  const messageReleaseClaimedBy = (physical: string, processIds: ReadonlyArray<string>, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`WITH r AS (
        UPDATE ${messages(physical)}
        SET vt = ${NOW(sql, now)}, claimed_by = NULL
        WHERE split_part(claimed_by, '#', 1) = ANY(${typedArray(processIds, PgTypes.OID.text)}::text[])
          AND vt > ${NOW(sql, now)}
        RETURNING msg_id)
      SELECT msg_id FROM r ${notifyFilter(physical)}`

  // The messages of one claim, by its mark, become visible at once: a claim whose reply was lost
  // with its connection may have committed, and no one else would release them before their vt.
  const messageReleaseClaim = (physical: string, claimedBy: string, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`WITH r AS (
        UPDATE ${messages(physical)}
        SET vt = ${NOW(sql, now)}, claimed_by = NULL
        WHERE claimed_by = ${claimedBy} AND vt > ${NOW(sql, now)}
        RETURNING msg_id)
      SELECT msg_id FROM r ${notifyFilter(physical)}`

  const messageRecordFailure = (
    physical: string,
    msgId: bigint,
    readCt: number,
    retryDelayMs: number,
    error: string,
    now: Date | null
  ) =>
    sql<{ readonly msg_id: bigint; readonly vt: Date }>`UPDATE ${messages(physical)}
      SET vt = ${NOW(sql, now)} + ${PgTypes.float8(retryDelayMs)} * interval '1 millisecond',
          claimed_by = NULL,
          last_error = ${error}::jsonb || jsonb_build_object('error_recorded_at',
            to_char(${NOW(sql, now)} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
      WHERE msg_id = ${msgId} AND read_ct = ${readCt}
      RETURNING msg_id, vt`

  // Moves one message to the dead-letter queue with the `pgbus_dead_letter` block. The
  // message's own headers stay beside the block; headers that are not an object are kept
  // under `pgbus_original_headers`. Error fields come from the given error, else from the
  // last failure recorded on the row.
  const messageMoveToDeadLetter = (
    physical: string,
    deadLetterPhysical: string,
    msgId: bigint,
    readCt: number | null,
    block: {
      readonly reason: string
      readonly source: string
      readonly maxRetries: number
      readonly error: string | null
    },
    now: Date | null
  ) =>
    sql<{ readonly msg_id: bigint }>`WITH d AS (
        DELETE FROM ${messages(physical)}
        WHERE msg_id = ${msgId} AND (${readCt}::int4 IS NULL OR read_ct = ${readCt}::int4)
        RETURNING *)
      INSERT INTO ${messages(deadLetterPhysical)} (enqueued_at, vt, message, headers)
      SELECT ${NOW(sql, now)}, ${NOW(sql, now)}, d.message,
        (CASE WHEN d.headers IS NULL THEN '{}'::jsonb
              WHEN jsonb_typeof(d.headers) = 'object' THEN d.headers
              ELSE jsonb_build_object('pgbus_original_headers', d.headers) END)
        || jsonb_build_object('pgbus_dead_letter',
             jsonb_strip_nulls(jsonb_build_object(
               'version', 1,
               'reason', ${block.reason}::text,
               'source', ${block.source}::text,
               'source_queue', ${physical}::text,
               'source_msg_id', d.msg_id,
               'attempts', d.read_ct,
               'max_retries', ${block.maxRetries}::int4,
               'dead_lettered_at', to_char(${NOW(sql, now)} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
               'retries_from_dlq', CASE WHEN jsonb_typeof(d.headers) = 'object'
                                        THEN ${sql.literal(DLQ_RETRIES_EXPR)} END))
             || coalesce(${block.error}::jsonb, d.last_error, '{}'::jsonb))
      FROM d
      RETURNING msg_id`

  // Puts a dead letter back on a queue: a live message must not claim to be dead, so the
  // block goes and `pgbus_dlq_retries` counts the trip.
  const messageRetryDeadLetter = (
    deadLetterPhysical: string,
    targetPhysical: string,
    ids: ReadonlyArray<bigint> | null,
    now: Date | null
  ) =>
    sql<{ readonly msg_id: bigint }>`WITH d AS (
        DELETE FROM ${messages(deadLetterPhysical)}
        WHERE ${ids === null ? sql`true` : sql`msg_id = ANY(${typedArray(ids, PgTypes.OID.int8)}::int8[])`}
        RETURNING *),
      m AS (
        INSERT INTO ${messages(targetPhysical)} (enqueued_at, vt, message, headers)
        SELECT ${NOW(sql, now)}, ${NOW(sql, now)}, d.message,
          (coalesce(d.headers, '{}'::jsonb) - 'pgbus_dead_letter')
            || jsonb_build_object('pgbus_dlq_retries', coalesce(${sql.literal(DLQ_RETRIES_EXPR)}, 0) + 1)
        FROM d ORDER BY d.msg_id
        RETURNING msg_id)
      SELECT msg_id FROM m ${notifyFilter(targetPhysical)}`

  const messagePurge = (physical: string) =>
    sql<{ readonly n: bigint }>`WITH d AS (DELETE FROM ${messages(physical)} RETURNING 1) SELECT count(*) AS n FROM d`

  const messageGet = (physical: string, msgId: bigint) =>
    sql<MessageRow>`SELECT msg_id, read_ct, enqueued_at, vt, message, headers, last_error
      FROM ${messages(physical)} WHERE msg_id = ${msgId}`

  const messageList = (physical: string, limit: number, afterId: bigint | null) =>
    sql<MessageRow>`SELECT msg_id, read_ct, enqueued_at, vt, message, headers, last_error
      FROM ${messages(physical)}
      WHERE ${afterId}::int8 IS NULL OR msg_id > ${afterId}::int8
      ORDER BY msg_id LIMIT ${limit}`

  const archiveGet = (physical: string, msgId: bigint) =>
    sql<ArchivedRow>`SELECT msg_id, read_ct, enqueued_at, archived_at, message, headers
      FROM ${archive(physical)} WHERE msg_id = ${msgId}`

  // one scan for many values: the workflow sweep asks which of its steps still have a message
  const messagePayloadValues = (physical: string, field: string, values: ReadonlyArray<string>) =>
    sql<{ readonly value: string }>`SELECT DISTINCT message -> 'payload' ->> ${field} AS value
      FROM ${messages(physical)}
      WHERE message -> 'payload' ->> ${field} = ANY(${Result.getOrThrow(PgTypes.array(values, PgTypes.OID.text))}::text[])`

  const archiveDeleteOlderThan = (physical: string, retentionMs: number, limit: number, now: Date | null) =>
    sql<{ readonly n: bigint }>`WITH d AS (
        DELETE FROM ${archive(physical)} WHERE msg_id IN (
          SELECT msg_id FROM ${archive(physical)}
          WHERE archived_at < ${NOW(sql, now)} - ${PgTypes.float8(retentionMs)} * interval '1 millisecond'
          LIMIT ${limit})
        RETURNING 1)
      SELECT count(*) AS n FROM d`

  // Where each message is now, in one snapshot (a move between tables is one statement, so
  // a message is seen in exactly one place): by id in the archive and the queue, then by a
  // marker header for copies that changed id (the dead-letter copy, one retried from it).
  // The header searches scan; they run only for ids found in neither.
  const messageLocate = (
    physical: string,
    deadLetterPhysical: string,
    ids: ReadonlyArray<bigint | null>,
    markerHeader: string,
    markers: ReadonlyArray<string>
  ) =>
    sql<{ readonly ord: bigint; readonly place: "queued" | "archived" | "dead" | "missing" }>`SELECT u.ord,
        CASE WHEN EXISTS (SELECT 1 FROM ${archive(physical)} a WHERE a.msg_id = u.msg_id) THEN 'archived'
             WHEN EXISTS (SELECT 1 FROM ${messages(physical)} q WHERE q.msg_id = u.msg_id) THEN 'queued'
             WHEN EXISTS (SELECT 1 FROM ${messages(deadLetterPhysical)} d
                          WHERE d.headers ->> ${markerHeader}::text = u.marker) THEN 'dead'
             WHEN EXISTS (SELECT 1 FROM ${messages(physical)} q
                          WHERE q.headers ->> ${markerHeader}::text = u.marker) THEN 'queued'
             ELSE 'missing' END AS place
      FROM unnest(${typedArray(ids, PgTypes.OID.int8)}::int8[], ${typedArray(markers, PgTypes.OID.text)}::text[])
        WITH ORDINALITY AS u(msg_id, marker, ord)
      ORDER BY u.ord`

  const queueMetrics = (physical: string, now: Date | null) =>
    sql<MetricsRow>`SELECT count(*) AS depth,
        count(*) FILTER (WHERE vt <= ${NOW(sql, now)}) AS visible,
        (extract(epoch FROM ${NOW(sql, now)} - min(enqueued_at)) * 1000)::float8 AS oldest_age_ms,
        (extract(epoch FROM ${NOW(sql, now)} - min(enqueued_at) FILTER (WHERE vt <= ${NOW(sql, now)})) * 1000)::float8
          AS oldest_visible_age_ms,
        (SELECT count(*) FROM ${archive(physical)}) AS archive_size
      FROM ${messages(physical)}`

  return {
    queueLockTransaction,
    queueRelationNames,
    queueObjectsPresent,
    queueCreateMessageTable,
    queueCreateVisibilityIndex,
    queueCreateArchiveTable,
    queueCreateArchiveIndex,
    queueRegister,
    queueCreateFairIndex,
    queueCreateFairIndexConcurrently,
    queueFairIndexState,
    fairIndexDropStatement,
    queueDropTables,
    queueUnregister,
    queueList,
    queueFind,
    queueMetrics,
    messageSendOne,
    messageSendOneClaimed,
    messageSendBatch,
    messageSendBatchUniform,
    messageSendCtes,
    messageSendWithIdsCtes,
    messageNextId,
    messageIdsPresent,
    messageRead,
    messageReadLimited,
    queueLockLimits,
    queueWake,
    messageLimitCounts,
    rateOverrideSet,
    rateOverrideClear,
    rateOverrideList,
    messageArchiveAndRead,
    messageReadFair,
    messageArchiveReceipts,
    messageArchiveIds,
    messageDeleteReceipts,
    messageDeleteIds,
    messageSetVisibilityReceipts,
    messageSetVisibilityIds,
    messageReleaseReceipts,
    messageRecordFailure,
    messageReleaseClaimedBy,
    messageReleaseClaim,
    messageMoveToDeadLetter,
    messageRetryDeadLetter,
    messagePurge,
    messageGet,
    messageList,
    archiveGet,
    messagePayloadValues,
    archiveDeleteOlderThan,
    messageLocate
  }
}

/** The statements of one schema. */
export type QueueSql = ReturnType<typeof makeQueueSql>
