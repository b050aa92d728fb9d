/**
 * Test helpers for jobs, shipped to users (Oban.Testing's `perform_job` and `assert_enqueued`,
 * rivertest's `Worker`): run a job inline through its Schema and the real executor, drain a
 * queue once through the real executor and completer, and assert what was enqueued.
 *
 * @since 0.1.0
 */
import { Clock, type Context, Effect, Schema } from "effect"
import { Batches } from "../Batch/Batch.ts"
import { PgBusConfig } from "../Config.ts"
import { makeCompleter, type Outcome } from "../Job/Completer.ts"
import { execute } from "../Job/Executor.ts"
import type { Job } from "../Job/Job.ts"
import { servedQueues } from "../Job/JobClient.ts"
import type { InvalidJobDefinition } from "../Job/JobError.ts"
import { cachedProvide, jobOf, registerJobs } from "../Job/RegisteredJob.ts"
import { resolvePolicy } from "../Job/Retry.ts"
import { settleOutcome } from "../Job/Settling.ts"
import type { Message } from "../Queue/Message.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import { Registry } from "../Registry.ts"

/**
 * A test's expectation did not hold: what was expected and what was found.
 *
 * @category errors
 */
export class AssertionFailed extends Schema.TaggedError<AssertionFailed>()("AssertionFailed", {
  expected: Schema.String,
  found: Schema.String
}) {
  override get message(): string {
    return `expected ${this.expected}; found ${this.found}`
  }
}

/** Whether `actual` holds everything `expected` says (objects by their listed keys, recursively). */
export const matches = (actual: unknown, expected: unknown): boolean => {
  if (typeof expected !== "object" || expected === null) return Object.is(actual, expected)
  if (typeof actual !== "object" || actual === null) return false
  if (expected instanceof Date) return actual instanceof Date && actual.getTime() === expected.getTime()
  if (Array.isArray(expected)) {
    return Array.isArray(actual) && actual.length === expected.length && expected.every((e, i) => matches(actual[i], e))
  }
  return Object.entries(expected).every(([key, value]) => matches((actual as Record<string, unknown>)[key], value))
}

const show = (value: unknown): string => {
  try {
    return JSON.stringify(value, (_, v) => (typeof v === "bigint" ? `${v}n` : v)) ?? String(value)
  } catch {
    return String(value)
  }
}

/**
 * Runs a job's handler inline through the real executor: the payload is encoded with the job's
 * Schema, stored as JSON would store it, decoded, run with its timeout and `JobContext`
 * (`attempt` 1 unless given), and the outcome the worker would apply is returned (`Succeeded`,
 * `Retry` with its delay and failure, `DeadLetter`). Nothing is written.
 */
export const performJob = <P, A, E, R>(
  job: Job<string, P, A, E, R>,
  payload: P,
  options: { readonly attempt?: number } = {}
): Effect.Effect<Outcome, Schema.SchemaError | InvalidJobDefinition, R | PgBusConfig> =>
  Effect.gen(function* () {
    const config = yield* PgBusConfig
    const services = (yield* Effect.context<R>()) as Context.Context<never>
    const jobs = yield* registerJobs(config, [job], cachedProvide(services))
    const encoded: unknown = JSON.parse(JSON.stringify(yield* Schema.encodeEffect(job.payload)(payload)) ?? "null")
    const now = new Date(yield* Clock.currentTimeMillis)
    const message: Message = {
      queue: job.queue ?? config.defaultQueue,
      msgId: 0n,
      readCt: options.attempt ?? 1,
      enqueuedAt: now,
      vt: now,
      message: { job: job.name, payload: encoded },
      headers: {},
      lastError: undefined
    }
    return yield* execute({ jobs }, resolvePolicy(config, undefined), message)
  })

/** What a drain did. */
export interface DrainReport {
  readonly succeeded: number
  readonly retried: number
  readonly deadLettered: number
}

/**
 * Runs every message of the queue that is ready now, one at a time, through the real executor
 * and completer (archive, retry with backoff, dead letter), and again for what those enqueued
 * ready on it, until none is ready (`maxRounds` reads at most). Retries come back after their
 * backoff, so a drain leaves them. Needs the `Registry` of the queue's jobs; no supervisor.
 */
export const drainQueue = (
  queue: string,
  options: { readonly maxRounds?: number } = {}
): Effect.Effect<DrainReport, QueueError, Registry | QueueStore | PgBusConfig | Batches> =>
  Effect.gen(function* () {
    const config = yield* PgBusConfig
    const store = yield* QueueStore
    const registry = yield* Registry
    const batches = yield* Batches
    const completer = makeCompleter({ store, registry, recordBatchOutcomes: batches.recordOutcomes })
    const policy = resolvePolicy(config, undefined)
    const report = { succeeded: 0, retried: 0, deadLettered: 0 }
    for (let round = 0; round < (options.maxRounds ?? 100); round++) {
      let ran = 0
      for (const physical of servedQueues(config, queue)) {
        const messages = yield* store.read(physical, { limit: 100 })
        for (const m of messages) {
          ran++
          // a success still settling (a workflow run's last outcome) is awaited, as a worker would
          const outcome = yield* Effect.flatMap(execute(registry, policy, m), (o) =>
            settleOutcome(o, m.readCt, jobOf(registry, m).registered?.policy ?? policy)
          )
          if (outcome._tag === "Succeeded") {
            // as a worker acknowledges it: archived, or deleted (a workflow step's, `deleteOnSuccess`)
            if (jobOf(registry, m).registered?.deleteOnSuccess === true) yield* store.delete(m.queue, [m])
            else yield* store.archive(m.queue, [m])
            yield* completer.archived([m])
            report.succeeded++
          } else {
            yield* completer.complete(m, outcome)
            if (outcome._tag === "Retry") report.retried++
            if (outcome._tag === "DeadLetter") report.deadLettered++
          }
        }
      }
      if (ran === 0) break
    }
    return report
  })

/** A job waiting in its queue (not yet run, or waiting to be retried), its payload decoded. */
export interface EnqueuedJob<P> {
  readonly msgId: bigint
  readonly queue: string
  readonly payload: P
  readonly message: Message
}

/** The messages of `job` in its queue (not archived), oldest first, payloads decoded with its Schema. */
export const enqueued = <P>(
  job: Job<string, P, unknown, unknown, unknown>
): Effect.Effect<ReadonlyArray<EnqueuedJob<P>>, QueueError | Schema.SchemaError, QueueStore | PgBusConfig> =>
  Effect.gen(function* () {
    const config = yield* PgBusConfig
    const store = yield* QueueStore
    const found: Array<EnqueuedJob<P>> = []
    const decode = Schema.decodeUnknownEffect(job.payload)
    for (const physical of servedQueues(config, job.queue ?? config.defaultQueue)) {
      let after: bigint | undefined
      for (;;) {
        const page = yield* store
          .browse(physical, after === undefined ? { limit: 500 } : { limit: 500, after })
          .pipe(Effect.catchTag("QueueNotFound", () => Effect.succeed([] as ReadonlyArray<Message>)))
        for (const m of page) {
          const { name, payload } = jobOf({ jobs: new Map() }, m)
          if (name === job.name)
            found.push({ msgId: m.msgId, queue: m.queue, payload: yield* decode(payload), message: m })
        }
        if (page.length < 500) break
        after = page[page.length - 1]!.msgId
      }
    }
    return found
  })

/**
 * Fails with `AssertionFailed` unless `job` is enqueued with a payload that holds `payload`
 * (objects matched by the keys given); `count` asks for exactly that many such messages.
 */
export const assertEnqueued = <P>(
  job: Job<string, P, unknown, unknown, unknown>,
  payload?: Partial<P>,
  options: { readonly count?: number } = {}
) =>
  Effect.gen(function* () {
    const all = yield* enqueued(job)
    const matching = payload === undefined ? all : all.filter((e) => matches(e.payload, payload))
    const ok = options.count === undefined ? matching.length > 0 : matching.length === options.count
    if (ok) return matching
    return yield* new AssertionFailed({
      expected: `${options.count ?? "at least 1"} ${job.name} job(s) enqueued${payload === undefined ? "" : ` with ${show(payload)}`}`,
      found: `${matching.length} matching of ${all.length} enqueued: ${show(all.map((e) => e.payload))}`
    })
  })

/** Fails with `AssertionFailed` if `job` is enqueued with a payload that holds `payload` (any, without one). */
export const refuteEnqueued = <P>(job: Job<string, P, unknown, unknown, unknown>, payload?: Partial<P>) =>
  Effect.gen(function* () {
    const all = yield* enqueued(job)
    const matching = payload === undefined ? all : all.filter((e) => matches(e.payload, payload))
    if (matching.length === 0) return
    return yield* new AssertionFailed({
      expected: `no ${job.name} job enqueued${payload === undefined ? "" : ` with ${show(payload)}`}`,
      found: show(matching.map((e) => e.payload))
    })
  })
