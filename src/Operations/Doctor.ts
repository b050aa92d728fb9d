/**
 * `pgbus doctor`: preflight checks for a deploy gate. Each check passes, warns or fails; a failed
 * check fails the report (exit 1), a warning does not. It never fails itself: a broken
 * environment turns every probe into a failed check.
 *
 * Checks: configuration (with a summary, passwords redacted), database reachable, schema version,
 * the configured queues exist, a LISTEN/NOTIFY round trip, process liveness (the cluster verdict),
 * autovacuum settings of the queue tables, long transactions holding back vacuum.
 *
 * @since 0.1.0
 */
import { PgClient } from "@effect/sql-pg"
import { Cause, Clock, Duration, Effect, Queue, Schema } from "effect"
import { describeTarget, effectivePoolSize, PgBusConfig } from "../Config.ts"
import { toDatabaseError } from "../Database.ts"
import { appliedMigrations, shippedMigrations } from "../Migrations.ts"
import { parseWorkers } from "../Supervisor/Capsule.ts"
import { makeCatalogSql, type XminHolderRow } from "./CatalogSql.ts"
import { Operations } from "./Operations.ts"

/** A check's result. */
export const CheckStatus = Schema.Literals(["ok", "warn", "fail", "skipped"])

/** One check. */
export const Check = Schema.Struct({ name: Schema.String, status: CheckStatus, detail: Schema.String })
export type Check = typeof Check.Type

/** The report: the checks and whether any failed. */
export const DoctorReport = Schema.Struct({
  ok: Schema.Boolean,
  checks: Schema.Array(Check),
  config: Schema.Record(Schema.String, Schema.String)
})
export type DoctorReport = typeof DoctorReport.Type

const describe = (error: unknown): string =>
  typeof error === "object" && error !== null && "message" in error && typeof error.message === "string"
    ? error.message
    : String(error)

/** Runs one probe; its failure (or defect) is a failed check, never the doctor's. */
const probe = <R>(
  name: string,
  effect: Effect.Effect<Omit<Check, "name">, unknown, R>
): Effect.Effect<Check, never, R> =>
  effect.pipe(
    Effect.map((c) => ({ name, ...c })),
    Effect.catchCause((cause) =>
      Effect.succeed({ name, status: "fail" as const, detail: describe(Cause.squash(cause)) })
    ),
    Effect.timeoutOrElse({
      duration: Duration.seconds(15),
      orElse: () => Effect.succeed({ name, status: "fail" as const, detail: "no answer within 15s" })
    })
  )

/** How old a transaction must be before the doctor warns that it holds back vacuum (seconds). */
export const LONG_TRANSACTION_SECONDS = 60

const describeHolder = (h: XminHolderRow): string =>
  h.kind === "session"
    ? `pid ${h.id}${h.application === "" ? "" : ` (${h.application})`} ${h.state} for ${Math.round(h.age_s ?? 0)}s${h.query ? `: ${h.query.replace(/\s+/g, " ")}` : ""}`
    : h.kind === "prepared transaction"
      ? `prepared transaction ${h.id} for ${Math.round(h.age_s ?? 0)}s`
      : `inactive replication slot ${h.id} (${h.application}) holding an xmin`

/**
 * Runs every check. `liveness: false` skips process liveness (at `start --doctor`, before this
 * process runs a worker). `longTransactionSeconds`: a transaction open longer than this
 * that holds a snapshot is warned about (default 60).
 */
export const run = (
  options: { readonly liveness?: boolean | undefined; readonly longTransactionSeconds?: number | undefined } = {}
) =>
  Effect.gen(function* () {
    const config = yield* PgBusConfig
    const ops = yield* Operations
    const pg = yield* PgClient.PgClient
    const checks: Array<Check> = []

    const capsules = yield* Effect.result(parseWorkers(config.workers))
    checks.push(
      capsules._tag === "Success"
        ? {
            name: "configuration",
            status: "ok",
            detail: `${capsules.success.length} capsule(s): ${capsules.success.map((c) => `${c.name}=${c.queues.join("+")}:${c.concurrency}`).join(", ")}`
          }
        : { name: "configuration", status: "fail", detail: capsules.failure.message }
    )

    const reachable = yield* probe(
      "database",
      Effect.map(ops.database, (db) => ({
        status: "ok" as const,
        detail: `${describeTarget(config)} reachable; ${db.connections.open} effect-pgbus connection(s) open`
      }))
    )
    checks.push(reachable)
    const up = reachable.status === "ok"

    const schema: Check = up
      ? yield* probe(
          "schema version",
          Effect.gen(function* () {
            const files = yield* shippedMigrations
            const applied = yield* appliedMigrations
            const latest = files.at(-1)?.id ?? 0
            const at = applied.at(-1)?.id ?? 0
            if (applied.length === 0) {
              return { status: "fail" as const, detail: `schema ${config.schema} is not migrated: run pgbus migrate` }
            }
            if (at > latest) {
              return {
                status: "fail" as const,
                detail: `the database is at migration ${at}, newer than this effect-pgbus (${latest}): upgrade it`
              }
            }
            const missing = files.filter((f) => !applied.some((a) => a.id === f.id))
            return missing.length > 0
              ? {
                  status: "fail" as const,
                  detail: `${missing.length} migration(s) not applied (${missing.map((f) => f.id).join(", ")}): run pgbus migrate`
                }
              : { status: "ok" as const, detail: `schema ${config.schema} at migration ${at} (latest)` }
          })
        )
      : { name: "schema version", status: "skipped", detail: "the database is unreachable" }
    checks.push(schema)
    // the checks below read effect-pgbus's tables
    const migrated = up && schema.status === "ok"
    const skipped = (name: string): Check => ({
      name,
      status: "skipped",
      detail: up ? "the schema is not migrated" : "the database is unreachable"
    })

    const wanted =
      capsules._tag === "Success"
        ? [...new Set([...capsules.success.flatMap((c) => c.queues), config.defaultQueue, config.workflowQueue])]
        : []
    checks.push(
      migrated
        ? yield* probe(
            "queues",
            Effect.gen(function* () {
              const queues = yield* ops.queues
              const names = new Set(queues.map((q) => q.name.replace(/_p\d+$/, "")))
              const missing = wanted.filter((q) => !names.has(q))
              return missing.length === 0
                ? { status: "ok" as const, detail: `${wanted.join(", ")} exist (${queues.length} queue(s) in all)` }
                : {
                    status: "warn" as const,
                    detail: `${missing.join(", ")} do(es) not exist yet (a supervisor or the first enqueue creates them)`
                  }
            })
          )
        : skipped("queues")
    )

    checks.push(
      !config.listenNotify
        ? { name: "LISTEN/NOTIFY", status: "warn", detail: "off (listenNotify=false): workers rely on polling" }
        : up
          ? yield* probe(
              "LISTEN/NOTIFY",
              Effect.scoped(
                Effect.gen(function* () {
                  const channel = `${config.schema}_doctor_${process.pid}`
                  const inbox = yield* pg.listen(channel)
                  const started = yield* Clock.currentTimeMillis
                  yield* pg.notify(channel, "ping").pipe(Effect.mapError(toDatabaseError("notify")))
                  const got = yield* Queue.take(inbox).pipe(Effect.timeoutOption("5 seconds"))
                  const took = (yield* Clock.currentTimeMillis) - started
                  return got._tag === "Some"
                    ? { status: "ok" as const, detail: `round trip in ${took} ms` }
                    : {
                        status: "warn" as const,
                        detail:
                          "no notification within 5s (a pooler in transaction mode?): workers fall back to polling"
                      }
                })
              )
            )
          : { name: "LISTEN/NOTIFY", status: "skipped", detail: "the database is unreachable" }
    )

    if (options.liveness === false) {
      checks.push({ name: "process liveness", status: "skipped", detail: "at boot: no worker runs yet" })
    } else if (migrated) {
      const verdict = yield* ops.health
      const processes = verdict.processes.healthy + verdict.processes.late + verdict.processes.stale
      checks.push({
        name: "process liveness",
        status:
          verdict.status === "STALLED" || verdict.status === "ERROR"
            ? "fail"
            : verdict.status === "DEGRADED" || processes === 0
              ? "warn"
              : "ok",
        detail:
          processes === 0
            ? "no process is running"
            : `${verdict.status}: ${verdict.processes.healthy} healthy, ${verdict.processes.late} late, ${verdict.processes.stale} stale${verdict.reasons.length > 0 ? `; ${verdict.reasons.join("; ")}` : ""}`
      })
    } else {
      checks.push(skipped("process liveness"))
    }

    checks.push(
      up
        ? yield* probe(
            "autovacuum",
            Effect.map(ops.database, (db) => {
              if (db.settings.autovacuum === "off") {
                return {
                  status: "warn" as const,
                  detail: "autovacuum is off on the server: vacuum the queue tables yourself or they bloat"
                }
              }
              const queueTables = db.tables.filter((t) => t.table.startsWith("q_"))
              const untuned = queueTables.filter(
                (t) => !t.options.some((o) => o.startsWith("autovacuum_vacuum_scale_factor"))
              )
              return untuned.length > 0
                ? {
                    status: "warn" as const,
                    detail: `${untuned.map((t) => t.table).join(", ")} lack(s) the per-table autovacuum settings effect-pgbus creates queues with`
                  }
                : {
                    status: "ok" as const,
                    detail: `on (naptime ${db.settings.autovacuum_naptime ?? "?"}s); ${queueTables.length} queue table(s) tuned`
                  }
            })
          )
        : { name: "autovacuum", status: "skipped", detail: "the database is unreachable" }
    )

    // A snapshot held open (a REPEATABLE READ report, an idle-in-transaction session, a forgotten
    // prepared transaction) keeps every row finished jobs leave behind: vacuum cannot remove them
    // and the queue tables bloat while it lasts.
    const threshold = options.longTransactionSeconds ?? LONG_TRANSACTION_SECONDS
    checks.push(
      up
        ? yield* probe(
            "long transactions",
            Effect.map(makeCatalogSql(pg, config.schema).xminHolders(threshold), (holders) =>
              holders.length === 0
                ? { status: "ok" as const, detail: `none older than ${threshold}s holds back vacuum` }
                : {
                    status: "warn" as const,
                    detail: `${holders.length} hold(s) back vacuum (the queue tables keep their dead rows meanwhile): ${holders
                      .slice(0, 3)
                      .map(describeHolder)
                      .join("; ")}${holders.length > 3 ? `; and ${holders.length - 3} more` : ""}`
                  }
            )
          )
        : { name: "long transactions", status: "skipped", detail: "the database is unreachable" }
    )

    return {
      ok: checks.every((c) => c.status !== "fail"),
      checks,
      config: {
        database: describeTarget(config),
        schema: config.schema,
        queuePrefix: config.queuePrefix,
        poolSize: `${effectivePoolSize(config)}${config.poolSize === undefined ? " (derived from workers)" : ""}`,
        workers: config.workers,
        listenNotify: String(config.listenNotify),
        visibilityTimeout: Duration.format(config.visibilityTimeout),
        stallThreshold: Duration.format(config.stallThreshold),
        healthPort: config.healthPort === undefined ? "off" : String(config.healthPort)
      }
    } satisfies DoctorReport
  })
