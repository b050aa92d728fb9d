/**
 * The queue statements of the registry (`<schema>.queues`) and each queue's tables: DDL, the
 * queue lock, the fair index, registration, listing.
 * Part of `QueueSql.ts`, which assembles every family into one set of statements for a schema.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import type { IndexStateRow, QueueRow } from "./QueueRows.ts"
import { FAIR_KEY_EXPR, type QueueSqlContext, typedArray } from "./QueueSqlContext.ts"

/** Builds the registry statements on the shared context. */
export const makeQueueRegistrySql = ({ sql, schema, registry, messages, archive, index }: QueueSqlContext) => {
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

  return {
    queueLockTransaction,
    queueCreateMessageTable,
    queueCreateVisibilityIndex,
    queueCreateArchiveTable,
    queueCreateArchiveIndex,
    queueRelationNames,
    queueObjectsPresent,
    queueRegister,
    queueCreateFairIndex,
    queueCreateFairIndexConcurrently,
    queueFairIndexState,
    fairIndexDropStatement,
    queueDropTables,
    queueUnregister,
    queueList,
    queueFind
  }
}
