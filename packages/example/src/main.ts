/**
 * The main job (`npm start`): migrate, enqueue a few demo jobs, run the supervisor. Watch the
 * log: a welcome mail, an invoice sync that fails twice then succeeds, an import that is
 * dead-lettered. Ctrl-C (SIGINT) or SIGTERM drains and exits 0. It runs on the server
 * DATABASE_URL (or PGHOST) names, else on the embedded PostgreSQL (data in `.pgbus/data`).
 */
import { Effect } from "effect"
import { Supervisor } from "effect-pgbus"
import * as Embedded from "effect-pgbus/embedded"
import { ImportLegacyData, Onboarding, registry, SendWelcome, SyncInvoice } from "./app.ts"

// `migrate: true` applies pending migrations as the layer is built. The mailers queue of
// SendWelcome is in no capsule of `workers`: the supervisor serves it in one of its own (and
// says so). On a server the environment names, the example uses a database of its own, `pgbus`
// (created when missing), never the URL's (often `postgres`).
const program = Effect.gen(function* () {
  yield* SendWelcome.enqueue({ userId: "ada" })
  yield* SendWelcome.enqueue({ userId: "grace" }, { delay: "3 seconds" })
  yield* SyncInvoice.enqueue({ invoice: 1042 })
  yield* ImportLegacyData.enqueue({ file: "customers-1998.csv" })
  const run = yield* Onboarding.start({ userId: `user-${Date.now()}` }, { actor: "example", reason: "demo" })
  yield* Effect.logInfo(
    `example: enqueued 4 demo jobs and started Onboarding run ${run.id}; starting the supervisor (Ctrl-C to stop)`
  )
  return yield* Supervisor.run
}).pipe(
  Effect.provide(registry),
  Effect.provide(Embedded.layer({ workers: "default: 5", migrate: true }, { ownDatabase: "pgbus" }))
)

Supervisor.runMain(program)
