/**
 * Statements on PostgreSQL's own catalogs and statistics (no effect-pgbus table): table health
 * of the schema's tables, the oldest open transaction, the server's identity, for the metrics
 * that tell when to tune and for `pgbus doctor`.
 *
 * @since 0.1.0
 */
import type { SqlClient } from "effect/sql"

/** One table of the schema: its tuples, the age of its last vacuum, its autovacuum options. */
export interface TableHealthRow {
  readonly table: string
  readonly live_tuples: bigint
  readonly dead_tuples: bigint
  /** Seconds since the last (auto)vacuum; null when never vacuumed. */
  readonly last_vacuum_age_s: number | null
  readonly last_autovacuum_age_s: number | null
  readonly options: ReadonlyArray<string> | null
}

/** A session, prepared transaction or replication slot holding back vacuum's horizon. */
export interface XminHolderRow {
  readonly kind: "session" | "prepared transaction" | "replication slot"
  readonly id: string
  readonly state: string
  readonly application: string
  /** Seconds since its transaction (or statement) began; null for a slot. */
  readonly age_s: number | null
  readonly query: string | null
}

/** Builds the statements for one schema. */
export const makeCatalogSql = (sql: SqlClient.SqlClient, schema: string) => {
  /** The server: version, database, when it started, now. */
  const serverInfo = () =>
    sql<{
      readonly version: string
      readonly database: string
      readonly started_at: Date
      readonly now: Date
    }>`SELECT current_setting('server_version') AS version, current_database() AS database,
        pg_postmaster_start_time() AS started_at, now() AS now`

  /** Tuples and vacuum ages of every table of the schema (queue tables included). */
  const tableHealth = () =>
    sql<TableHealthRow>`SELECT s.relname AS table, s.n_live_tup AS live_tuples, s.n_dead_tup AS dead_tuples,
        extract(epoch FROM now() - greatest(s.last_vacuum, s.last_autovacuum))::float8 AS last_vacuum_age_s,
        extract(epoch FROM now() - s.last_autovacuum)::float8 AS last_autovacuum_age_s,
        c.reloptions AS options
      FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
      WHERE s.schemaname = ${schema}
      ORDER BY s.relname`

  /** Age of the oldest transaction open on this database, other than this statement's (ms; null: none). */
  const oldestTransaction = () =>
    sql<{ readonly age_ms: number | null }>`SELECT
        (extract(epoch FROM now() - min(xact_start)) * 1000)::float8 AS age_ms
      FROM pg_stat_activity
      WHERE datname = current_database() AND xact_start IS NOT NULL AND pid <> pg_backend_pid()`

  /** The server-wide autovacuum settings. */
  const autovacuumSettings = () =>
    sql<{ readonly name: string; readonly setting: string }>`SELECT name, setting FROM pg_settings
      WHERE name IN ('autovacuum', 'autovacuum_naptime', 'autovacuum_vacuum_scale_factor', 'autovacuum_vacuum_cost_delay')
      ORDER BY name`

  /** Connections of clients named `applicationName` on this database: open and idle (every process's pools). */
  const clientConnections = (applicationName: string) =>
    sql<{ readonly open: bigint; readonly idle: bigint }>`SELECT count(*) AS open,
        count(*) FILTER (WHERE state = 'idle') AS idle
      FROM pg_stat_activity WHERE datname = current_database() AND application_name = ${applicationName}`

  /**
   * What holds back vacuum's horizon on this database for longer than `olderThanS` seconds:
   * sessions with a snapshot or a transaction id (a REPEATABLE READ reader, a long statement, an
   * idle-in-transaction writer), prepared transactions, and inactive replication slots holding an
   * xmin. While one is there, the rows finished jobs leave behind cannot be vacuumed away.
   */
  const xminHolders = (olderThanS: number) =>
    sql<XminHolderRow>`SELECT * FROM (
        SELECT 'session' AS kind, pid::text AS id, coalesce(state, '') AS state,
          coalesce(application_name, '') AS application,
          extract(epoch FROM now() - coalesce(xact_start, query_start, backend_start))::float8 AS age_s,
          left(query, 80) AS query
        FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()
          AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
          AND now() - coalesce(xact_start, query_start, backend_start) > ${olderThanS} * interval '1 second'
        UNION ALL
        SELECT 'prepared transaction', gid, 'prepared', owner::text,
          extract(epoch FROM now() - prepared)::float8, NULL
        FROM pg_prepared_xacts
        WHERE database = current_database() AND now() - prepared > ${olderThanS} * interval '1 second'
        UNION ALL
        SELECT 'replication slot', slot_name::text, 'inactive', coalesce(plugin::text, 'physical'), NULL, NULL
        FROM pg_replication_slots
        WHERE NOT active AND xmin IS NOT NULL AND (database IS NULL OR database = current_database())) h
      ORDER BY age_s DESC NULLS FIRST`

  return { serverInfo, tableHealth, oldestTransaction, autovacuumSettings, clientConnections, xminHolders }
}

/** The statements of one schema. */
export type CatalogSql = ReturnType<typeof makeCatalogSql>
