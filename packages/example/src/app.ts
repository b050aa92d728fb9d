/**
 * The example app's jobs. `pgbus start --app packages/example/src/app.ts` loads the default
 * export (a Registry layer); `npm start` runs them through main.ts.
 */
import { Effect, Schema } from "effect"
import { Job, Registry, Workflow } from "effect-pgbus"

/** Sends a welcome mail (it only logs). */
export const SendWelcome = Job.make(
  "SendWelcome",
  { payload: Schema.Struct({ userId: Schema.String }), queue: "mailers" },
  ({ userId }) => Effect.logInfo(`welcome mail sent to ${userId}`)
)

/** Calls a flaky API: fails on its first two attempts, succeeds on the third. */
export const SyncInvoice = Job.make(
  "SyncInvoice",
  {
    payload: Schema.Struct({ invoice: Schema.Number }),
    retry: { backoff: "1 second" }
  },
  ({ invoice }, job) =>
    job.attempt < 3
      ? Effect.fail(new Error(`billing API unavailable (attempt ${job.attempt}) for invoice ${invoice}`))
      : Effect.logInfo(`invoice ${invoice} synced on attempt ${job.attempt}`)
)

/** Always fails: dead-lettered after two deliveries, see `npm run pgbus -- dlq list`. */
export const ImportLegacyData = Job.make(
  "ImportLegacyData",
  {
    payload: Schema.Struct({ file: Schema.String }),
    retry: { maxRetries: 2, backoff: "1 second" }
  },
  ({ file }) => Effect.fail(new Error(`cannot parse ${file}: unexpected end of input`))
)

/**
 * Onboards a user: a welcome mail, an invoice created and synced, a check after a pause. Each
 * step is durable: a crash or a deploy in between resumes where the run was.
 */
export const Onboarding = Workflow.make(
  "Onboarding",
  { payload: Schema.Struct({ userId: Schema.String }), version: "1" },
  function* ({ payload }) {
    yield* Workflow.step(
      "welcome",
      Effect.map(SendWelcome.enqueue({ userId: payload.userId }), (job) => job.id)
    )
    const invoice = yield* Workflow.step(
      "create-invoice",
      Effect.gen(function* () {
        const key = yield* Workflow.stepIdempotencyKey
        yield* Effect.logInfo(`invoice created for ${payload.userId} (idempotency key ${key})`)
        return { invoice: payload.userId.length * 1000 + 7 }
      })
    )
    yield* Workflow.step(
      "sync-invoice",
      Effect.map(SyncInvoice.enqueue(invoice), (job) => job.id)
    )
    yield* Workflow.step("check-in", Effect.logInfo(`checking in with ${payload.userId}`), { wait: "2 seconds" })
    return invoice.invoice
  }
)

/** The example app's registry. */
export const registry = Registry.layer([SendWelcome, SyncInvoice, ImportLegacyData, Onboarding])

export default registry
