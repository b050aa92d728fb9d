/**
 * One row must not block its queue: a message whose read count is at int4's maximum (or whose
 * hand-written headers carry a bad retry count) used to fail every claim of its queue
 * ("integer out of range"); it now goes to the DLQ with its reason and later jobs run.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Ref, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Job from "../src/Job/Job.ts"
import { READ_COUNT_LIMIT } from "../src/Queue/Message.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ n: Schema.Number })

describe("a poison row", () => {
  it.live("read_ct at the int4 maximum: the row goes to the DLQ with its reason, later jobs run", () =>
    TestDatabase.onFreshDatabase({ pollingInterval: "50 millis", workers: "poison: 2" }, () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const store = yield* QueueStore
        const ran = yield* Ref.make<ReadonlyArray<number>>([])
        const Work = Job.make("Work", { payload: Payload, queue: "poison" }, ({ n }) =>
          Ref.update(ran, (all) => [...all, n])
        )
        const poison = yield* Work.enqueue({ n: 0 })
        // as a row looks after two billion deliveries, or when written by hand; its headers
        // carry a retry count no cast can read
        yield* sql`UPDATE pgbus.q_pgbus_poison SET read_ct = ${READ_COUNT_LIMIT},
            headers = coalesce(headers, '{}'::jsonb) || '{"pgbus_dlq_retries": "many"}'::jsonb
          WHERE msg_id = ${poison.msgId}`
        yield* Work.enqueueMany([1, 2, 3, 4, 5].map((n) => ({ n })))
        yield* startSupervisor([Work])

        yield* eventually(
          "the later jobs run",
          Effect.map(Ref.get(ran), (all) => all.length >= 5)
        )
        assert.deepStrictEqual([...(yield* Ref.get(ran))].sort(), [1, 2, 3, 4, 5])
        yield* eventually(
          "the poison row is in the DLQ",
          Effect.map(store.browse("poison_dlq"), (rows) => rows.length === 1)
        )
        const [dead] = yield* store.browse("poison_dlq")
        const block = store.deadLetterOf(dead!).deadLetter
        assert.strictEqual(block?.reason, "read_count_limit")
        assert.strictEqual(block?.attempts, READ_COUNT_LIMIT)
        assert.strictEqual(block?.error_class, "ReadCountLimit")
        // the last job's archive is flushed a moment after its handler returned
        yield* eventually(
          "the queue is empty",
          Effect.map(store.metrics("poison"), (m) => m.depth === 0)
        )
        // retried from the DLQ, it is a live job again (its bad retry count read as none)
        assert.strictEqual((yield* store.retryDeadLetters("poison_dlq", "all")).length, 1)
        yield* eventually(
          "the retried job runs",
          Effect.map(Ref.get(ran), (all) => all.includes(0))
        )
      })
    )
  )

  it.live("an ordered queue: a head with read_ct at the int4 maximum is dead-lettered and its key moves on", () =>
    TestDatabase.onFreshDatabase({ pollingInterval: "50 millis", workers: "poisonseq: 2" }, () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const store = yield* QueueStore
        const ran = yield* Ref.make<ReadonlyArray<number>>([])
        const Work = Job.make("SeqWork", { payload: Payload, queue: "poisonseq", orderKey: () => "k" }, ({ n }) =>
          Ref.update(ran, (all) => [...all, n])
        )
        const poison = yield* Work.enqueue({ n: 0 })
        yield* sql`UPDATE pgbus.q_pgbus_poisonseq SET read_ct = ${READ_COUNT_LIMIT} WHERE msg_id = ${poison.msgId}`
        yield* Work.enqueueMany([1, 2, 3].map((n) => ({ n })))
        yield* startSupervisor([Work])
        yield* eventually(
          "the key's next jobs run, in order",
          Effect.map(Ref.get(ran), (all) => all.length >= 3)
        )
        assert.deepStrictEqual(yield* Ref.get(ran), [1, 2, 3])
        const [dead] = yield* store.browse("poisonseq_dlq")
        assert.strictEqual(store.deadLetterOf(dead!).deadLetter?.reason, "read_count_limit")
      })
    )
  )
})
