/**
 * The example app's jobs. `pgbus start --app packages/example/src/app.ts` loads the default
 * export (a Registry layer); `npm start` runs them through main.ts.
 */
import { Effect, Schema } from "effect"
import { Job, Registry } from "effect-pgbus"

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

/** The example app's registry. */
export const registry = Registry.layer([SendWelcome, SyncInvoice, ImportLegacyData])

export default registry
