/**
 * The workers' queue store: the one a process's workers claim, archive and retry through, on
 * the workers' session (`Database.WorkerSession`, a pipelined client of its own) rather than the pool. A
 * capsule's claim and its flusher's archive touch the same table; on the pool they ran at once
 * on two backends, each slowing the other and taking the core the handlers run on. Pipelined on
 * one connection, they run one after the other with no round trip between them. Everything else
 * (enqueues, the dispatcher's sweeps, callers' transactions) stays on the pool, so a statement
 * waiting on a caller's lock holds up nothing but the workers.
 *
 * Built with the layer, not the supervisor: a supervisor that stops while the session connects
 * does not wait on a pool that is closing.
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import type { PgBusConfig } from "../Config.ts"
import { WorkerSession } from "../Database.ts"
import type { Notifier } from "./Notifier.ts"
import { QueueStore } from "./QueueStore.ts"

/** The queue store of this process's workers, on the workers' session. */
export class WorkerQueueStore extends Context.Service<WorkerQueueStore, QueueStore["Service"]>()(
  "effect-pgbus/WorkerQueueStore"
) {
  /** The workers' store on the workers' session. */
  static readonly layer: Layer.Layer<WorkerQueueStore, never, PgBusConfig | Notifier | WorkerSession> = Layer.effect(
    WorkerQueueStore,
    Effect.gen(function* () {
      const client = yield* WorkerSession
      // fresh: the pool's QueueStore is memoised under the same layer
      const built = yield* Layer.build(
        Layer.fresh(QueueStore.layer).pipe(Layer.provide(Layer.succeed(SqlClient.SqlClient, client)))
      )
      return Context.get(built, QueueStore)
    })
  )
}
