/**
 * The library's own jobs (workflow steps, fan-out callbacks, event deliveries): registered
 * under reserved names by the feature that owns them and run by the library instead of a
 * user's handler.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import type { PgBusConfigShape } from "../Config.ts"
import type { DeadLetterSource } from "../Queue/Message.ts"
import type { AnyJob, JobContext } from "./Job.ts"
import { PayloadDecodeError } from "./JobError.ts"
import type { RegisteredJob } from "./RegisteredJob.ts"
import { resolvePolicy } from "./Retry.ts"

/** A job of the library's own (workflow steps, fan-out callbacks, event deliveries), run by `run`. */
export const internalJob = <P>(
  config: PgBusConfigShape,
  name: string,
  payload: Schema.ConstraintCodec<P, unknown>,
  queue: string | undefined,
  run: (payload: P, context: JobContext["Service"]) => Effect.Effect<unknown, unknown>,
  options?: {
    readonly deadLetterSource?: DeadLetterSource | undefined
    /**
     * A cheap check of the payload's shape: a message it accepts is taken as it is, without the
     * Schema's decode (which must give back the same value for it); any other goes through the Schema.
     */
    readonly accepts?: ((message: unknown) => message is P) | undefined
    /** The job's outcome is written elsewhere, durably: its archive is a lease (`RegisteredJob.archiveIsLease`). */
    readonly archiveIsLease?: boolean | undefined
    /** Its success is deleted, not archived (`RegisteredJob.deleteOnSuccess`). */
    readonly deleteOnSuccess?: boolean | undefined
    /** The claim a worker's read makes for its messages (`RegisteredJob.readClaim`). */
    readonly readClaim?: RegisteredJob["readClaim"]
  }
): RegisteredJob => {
  const decodeSchema = Schema.decodeUnknownEffect(payload)
  const accepts = options?.accepts
  const decode =
    accepts === undefined ? decodeSchema : (u: unknown) => (accepts(u) ? Effect.succeed(u) : decodeSchema(u))
  return {
    job: {
      ...({} as AnyJob),
      name,
      payload: payload as never,
      success: undefined,
      queue,
      priority: undefined,
      retry: undefined,
      timeout: undefined,
      discardOn: undefined,
      deadLetterOn: undefined,
      orderKey: undefined,
      onDeadLetter: undefined,
      handler: (() => Effect.void) as never
    },
    policy: resolvePolicy(config, undefined),
    // eager: an accepted message (an Exit) goes on with no Effect of its own
    decode: (message) =>
      Effect.mapErrorEager(decode(message), (e) => new PayloadDecodeError({ job: name, issue: e.message })),
    run: (message, context) => run(message as P, context),
    provide: (effect, also) => (also === undefined ? effect : Effect.updateContext(effect, also)),
    ...(options?.deadLetterSource === undefined ? {} : { deadLetterSource: options.deadLetterSource }),
    ...(options?.archiveIsLease === true ? { archiveIsLease: true } : {}),
    ...(options?.deleteOnSuccess === true ? { deleteOnSuccess: true } : {}),
    ...(options?.readClaim === undefined ? {} : { readClaim: options.readClaim })
  }
}
