/**
 * Encoding a job's payload with its Schema before it is sent: the encoded value must survive
 * JSON unchanged (the worker decodes what JSON gives back), and the common case (a synchronous
 * Schema that succeeds) costs no Effect per payload.
 *
 * @since 0.1.0
 */
import { Effect, Exit, Schema } from "effect"
import { jsonMismatch } from "../internal/jsonSafe.ts"
import type { Job } from "./Job.ts"
import { InvalidPayload } from "./JobError.ts"

// the worker decodes what JSON gives back: an encoded payload JSON changes (a Date, a
// bigint) would fail there, on every attempt, so it fails here
const notJson = (job: { readonly name: string }, encoded: unknown) => {
  const mismatch = jsonMismatch(encoded, "payload")
  return mismatch === undefined
    ? undefined
    : new InvalidPayload({
        job: job.name,
        issue: `the encoded ${mismatch}: the payload Schema must encode to JSON (Schema.DateFromString, not Schema.Date; Schema.BigIntFromString, not Schema.BigInt)`
      })
}

/** Encodes one payload as an Effect: a Schema failure or a value JSON would change is `InvalidPayload`. */
export const encodePayload = <P>(job: Job<string, P, unknown, unknown, unknown>, payload: P) =>
  Schema.encodeEffect(job.payload)(payload).pipe(
    Effect.mapError((error) => new InvalidPayload({ job: job.name, issue: error.message })),
    Effect.flatMap((encoded) => {
      const invalid = notJson(job, encoded)
      return invalid === undefined ? Effect.succeed(encoded) : Effect.fail(invalid)
    })
  )

/** Encodes one payload synchronously when it succeeds (an Exit is an Effect); otherwise as `encodePayload` reports it. */
export const encodeOne = <P>(job: Job<string, P, unknown, unknown, unknown>, payload: P) => {
  const exit = Schema.encodeExit(job.payload)(payload)
  return Exit.isSuccess(exit) && notJson(job, exit.value) === undefined
    ? Exit.succeed(exit.value)
    : encodePayload(job, payload)
}

/**
 * Encodes many payloads synchronously, without an Effect per payload; anything but success for
 * all (a failure, an asynchronous schema) takes `encodePayload`'s path, which reports it as before.
 */
export const encodeAll = <P>(job: Job<string, P, unknown, unknown, unknown>, payloads: ReadonlyArray<P>) => {
  const encodeExit = Schema.encodeExit(job.payload)
  const out: Array<unknown> = new Array(payloads.length)
  for (let i = 0; i < payloads.length; i++) {
    const exit = encodeExit(payloads[i]!)
    if (!Exit.isSuccess(exit) || notJson(job, exit.value) !== undefined) {
      return Effect.forEach(payloads, (p) => encodePayload(job, p))
    }
    out[i] = exit.value
  }
  return Effect.succeed(out)
}
