/**
 * The queue example: migrate, create a queue, send a few messages (one delayed), read them
 * with a wait, archive them, and print the queue's figures. Runs against DATABASE_URL, else the embedded server.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import { PgBus, QueueStore } from "effect-pgbus"
import * as Embedded from "effect-pgbus/embedded"

const program = Effect.gen(function* () {
  yield* PgBus.migrate
  const queues = yield* QueueStore
  yield* queues.create("example")
  yield* queues.sendBatch("example", [{ message: { greet: "hello" } }, { message: { greet: "world" } }])
  yield* queues.send("example", { greet: "a second later" }, { delay: "1 second" })

  let received = 0
  while (received < 3) {
    const messages = yield* queues.readWithPoll("example", { limit: 10, maxWait: "5 seconds" })
    for (const m of messages)
      yield* Effect.log(`message ${m.msgId} (delivery ${m.readCt}): ${JSON.stringify(m.message)}`)
    yield* queues.archive("example", messages)
    received += messages.length
  }
  const metrics = yield* queues.metrics("example")
  yield* Effect.log(`queue example: depth ${metrics.depth}, archived ${metrics.archiveSize}`)
})

program.pipe(Effect.provide(Embedded.layer()), NodeRuntime.runMain)
