/**
 * The queue statements of the claims of `q_<queue>`: the plain read (PGMQ's), archive-and-read
 * in one statement, and the fair read.
 * Part of `QueueSql.ts`, which assembles every family into one set of statements for a schema.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import type { Statement } from "effect/sql"
import { LEASE_COMMIT } from "../internal/leaseCommit.ts"
import type { FairMessageRow, MessageRow, ReceiptParams } from "./QueueRows.ts"
import {
  claimScan,
  FAIR_KEY_EXPR,
  FAIR_WEIGHT_EXPR,
  NOW,
  type QueueSqlContext,
  READ_COUNT_NEXT_EXPR,
  typedArray
} from "./QueueSqlContext.ts"

/** Builds the claim statements on the shared context. */
export const makeQueueClaimSql = ({ sql, messages, archive, receiptIdsCte, receiptMatch }: QueueSqlContext) => {
  // PGMQ's read: oldest visible first, rows locked by another reader skipped, vt moved on.
  // The claimed rows are updated by id (= ANY of the locked ids), not by a join with the CTE:
  // in the prepared statement's generic plan (the LIMIT unknown) the join was a hash join over
  // a sequential scan of the whole queue table, dead rows included, and Postgres picks that
  // plan when the table is small enough (claims of messages without headers ran about 2x
  // slower). By id it is an index scan in every plan.
  // `from`: the lowest id read (ClaimCursor: a worker's claim starts near its last one, so it
  // does not walk the dead rows of finished jobs that a held snapshot keeps from vacuum).
  // `lease`: the statement is its own transaction, whose commit need not wait for the WAL flush
  // (a claim is a lease: lost in a server crash, its messages are visible again; see
  // internal/leaseCommit.ts). Never inside a caller's transaction.
  // `claims`: another module's claim in the same statement (QueueRows.ReadClaim), for the
  // messages `u` claimed; its `rc` rows come back on their messages' rows.
  const messageRead = (
    physical: string,
    limit: number,
    visibilityMs: number,
    claimedBy: string | null,
    now: Date | null,
    from = 0n,
    lease = false,
    claims?: Statement.Fragment
  ) => {
    // one row more than the limit is locked (not claimed): `more` says whether the read left any;
    // the scan reads the primary key whatever the statistics (claimScan)
    const scan = claimScan(sql, messages(physical), "", from, limit + 1, now)
    const locked = sql`c AS (
        SELECT msg_id FROM ${messages(physical)}
        WHERE ${scan.where}
        ORDER BY msg_id
        LIMIT ${scan.limit}
        FOR UPDATE SKIP LOCKED),
      t AS (SELECT msg_id FROM c ORDER BY msg_id LIMIT ${limit})`
    const update = sql`UPDATE ${messages(physical)} q
      SET vt = ${NOW(sql, now)} + ${PgTypes.float8(visibilityMs)} * interval '1 millisecond',
          read_ct = ${sql.literal(READ_COUNT_NEXT_EXPR)},
          claimed_by = ${claimedBy}
      WHERE q.msg_id = ANY(ARRAY(SELECT msg_id FROM t))${lease ? sql` AND ${sql.literal(LEASE_COMMIT)}` : sql``}`
    type Row = MessageRow & { readonly more: boolean; readonly rc_msg_id?: bigint | null }
    if (claims !== undefined) {
      return sql<Row>`WITH ${locked},
      u AS (${update}
        RETURNING q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers, q.last_error),
      ${claims}
      SELECT u.*, (SELECT count(*) FROM c) > ${limit} AS more, rc.* FROM u LEFT JOIN rc ON rc.rc_msg_id = u.msg_id`
    }
    return sql<Row>`WITH ${locked}
      ${update}
      RETURNING q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers, q.last_error,
        (SELECT count(*) FROM c) > ${limit} AS more`
  }

  // Archives a worker's finished messages and claims the next ones in one statement (one round
  // trip where a flush and a read took two). The claim skips every row the receipts name: a
  // row modified twice in one statement would end in either state. The ids are sent once (`rids`).
  // `lease`: as `messageRead`'s, only when the archive is not the messages' outcome (workflow
  // steps': their outcome is committed with the step); never for a job whose archive is its completion.
  const messageArchiveAndRead = (
    physical: string,
    r: ReceiptParams,
    limit: number,
    visibilityMs: number,
    claimedBy: string | null,
    now: Date | null,
    from = 0n,
    lease = false,
    claims?: Statement.Fragment,
    // receipts among `r` deleted, not archived (ReadOptions.deleted)
    unarchived: ReadonlyArray<bigint> = []
  ) => {
    // the receipts' ids are skipped through the rids CTE (a scalar subquery, unseen by the planner too)
    const scan = claimScan(sql, messages(physical), "", from, limit + 1, now, true)
    const ctes = sql`${receiptIdsCte(r)},
      d AS (
        DELETE FROM ${messages(physical)} q
        WHERE ${receiptMatch}
        RETURNING q.*),
      a AS (
        INSERT INTO ${archive(physical)} (msg_id, read_ct, enqueued_at, archived_at, vt, message, headers)
        SELECT msg_id, read_ct, enqueued_at, ${NOW(sql, now)}, vt, message, headers FROM d
        WHERE d.msg_id <> ALL(${typedArray(unarchived, PgTypes.OID.int8)}::int8[])
        RETURNING msg_id),
      c AS (
        SELECT msg_id FROM ${messages(physical)}
        WHERE ${scan.where}
        ORDER BY msg_id
        LIMIT ${scan.limit}
        FOR UPDATE SKIP LOCKED),
      t AS (SELECT msg_id FROM c ORDER BY msg_id LIMIT ${limit}),
      u AS (
        UPDATE ${messages(physical)} q
        SET vt = ${NOW(sql, now)} + ${PgTypes.float8(visibilityMs)} * interval '1 millisecond',
            read_ct = ${sql.literal(READ_COUNT_NEXT_EXPR)},
            claimed_by = ${claimedBy}
        WHERE q.msg_id = ANY(ARRAY(SELECT msg_id FROM t))
        RETURNING q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers, q.last_error)`
    const select = sql`SELECT msg_id, read_ct, enqueued_at, vt, message, headers, last_error, NULL::int8 AS archived,
        NULL::bool AS more FROM u
      UNION ALL
      SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, (SELECT count(*) FROM d), (SELECT count(*) FROM c) > ${limit}${lease ? sql` WHERE ${sql.literal(LEASE_COMMIT)}` : sql``}`
    type Row = MessageRow & {
      readonly archived: bigint | null
      readonly more: boolean | null
      readonly rc_msg_id?: bigint | null
    }
    return claims === undefined
      ? sql<Row>`WITH ${ctes}
      ${select}`
      : sql<Row>`WITH ${ctes},
      ${claims}
      SELECT x.*, rc.* FROM (${select}) x LEFT JOIN rc ON rc.rc_msg_id = x.msg_id`
  }

  // The fair read (see FairShare.ts): the keys present are found by a skip scan of the fair
  // index (one probe per key), whose row for a key is its oldest message: the key's head when
  // it is visible, so the heads need no probe of their own. Each key with visible messages
  // ranks its `limit` oldest, rank r of weight w starting at credit + (r - 1) / w (ranks after
  // the head: a second probe); the lowest starts are claimed, ties to the oldest, with PGMQ's
  // lock, skip and visibility update. Credits are the reader's memory. Candidates are sorted
  // before the join to the table, so the lock stops at `limit` rows (about 2.5 times faster
  // than sorting after it with 200 keys). With at least twice `limit` keys, a key ranks only
  // the messages whose start can be among the lowest (bound): at most the (2 × limit)-th
  // lowest head, a start that many real candidates reach. With 1,000 keys a claim of 300 then
  // ranks one message per key instead of up to 300 (10,000 candidates sorted, 39 ms). The
  // margin of one more `limit`: another reader's claim, locked and skipped, can take that many
  // of them and this claim still fills.
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
    const weight = sql.literal(FAIR_WEIGHT_EXPR)
    // a key's ranks after its head: none when a read takes one message
    const later =
      limit > 1
        ? sql`
        UNION ALL
        SELECT r.msg_id, heads.k, heads.w, heads.credit + r.rn / heads.w AS start
        FROM heads CROSS JOIN bound
        CROSS JOIN LATERAL (
          SELECT s.msg_id, row_number() OVER (ORDER BY s.vt, s.msg_id) AS rn
          FROM (SELECT msg_id, vt FROM ${q}
                WHERE ${key} = heads.k AND vt <= ${NOW(sql, now)}
                ORDER BY vt, msg_id
                OFFSET 1
                LIMIT CASE WHEN bound.t IS NULL THEN ${limit - 1}
                  ELSE least(${limit - 1}, greatest(floor((bound.t - heads.credit) * heads.w + 1e-9), 0)::int8) END) s) r
        WHERE bound.t IS NULL OR heads.credit + 1 / heads.w <= bound.t + 1e-9`
        : sql``
    return sql<FairMessageRow>`WITH RECURSIVE keys(k, msg_id, vt, w) AS (
        (SELECT ${key}, msg_id, vt, ${weight} FROM ${q} ORDER BY ${key}, vt, msg_id LIMIT 1)
        UNION ALL
        SELECT n.k, n.msg_id, n.vt, n.w
        FROM keys CROSS JOIN LATERAL (
          SELECT ${key} AS k, msg_id, vt, ${weight} AS w FROM ${q}
          WHERE ${key} > keys.k ORDER BY ${key}, vt, msg_id LIMIT 1) n),
      heads AS (
        SELECT keys.k, keys.msg_id, keys.w, coalesce(m.credit, 0) AS credit
        FROM keys
        LEFT JOIN unnest(${typedArray(credits.keys, PgTypes.OID.text)}::text[],
                         ${typedArray(credits.credits, PgTypes.OID.float8)}::float8[]) AS m(k, credit)
          ON m.k = keys.k
        WHERE keys.vt <= ${NOW(sql, now)}),
      bound AS (
        SELECT (SELECT h.credit FROM heads h ORDER BY h.credit OFFSET ${2 * limit - 1} LIMIT 1) AS t),
      cand AS (
        SELECT heads.msg_id, heads.k, heads.w, heads.credit AS start
        FROM heads CROSS JOIN bound
        WHERE bound.t IS NULL OR heads.credit <= bound.t + 1e-9${later}),
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

  return {
    messageRead,
    messageArchiveAndRead,
    messageReadFair
  }
}
