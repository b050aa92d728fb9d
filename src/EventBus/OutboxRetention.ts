/**
 * The outbox's retention: published entries are deleted `outboxRetention` after they were
 * relayed, in pages, at most every ten minutes.
 *
 * @since 0.1.0
 */
import { Cause, Duration, Effect } from "effect"
import { statementNow } from "../Database.ts"
import type { OutboxContext } from "./OutboxContext.ts"

/** Published entries are purged at most this often. */
const PURGE_EVERY = Duration.minutes(10)
const PURGE_BATCH = 5_000

/** Builds the purge and its loop over the outbox's context. */
export const makeOutboxRetention = ({ config, statements, db }: OutboxContext) => {
  const purge = Effect.gen(function* () {
    if (config.outboxRetention === undefined) return 0
    const retentionMs = Duration.toMillis(config.outboxRetention)
    let deleted = 0
    while (true) {
      const now = yield* statementNow
      const [row] = yield* statements.outboxPurge(retentionMs, PURGE_BATCH, now).pipe(db("purge outbox"))
      const n = row?.n ?? 0
      deleted += n
      if (n < PURGE_BATCH) return deleted
    }
  })

  const purgeLoop = purge.pipe(
    Effect.tap((n) => (n > 0 ? Effect.logInfo(`pgbus: outbox retention deleted ${n} entries`) : Effect.void)),
    Effect.catchCause((cause) =>
      Cause.hasInterruptsOnly(cause)
        ? Effect.interrupt
        : Effect.logWarning("pgbus: outbox purge failed", Cause.pretty(cause))
    ),
    Effect.andThen(Effect.sleep(PURGE_EVERY)),
    Effect.forever
  )

  return { purge, purgeLoop }
}
