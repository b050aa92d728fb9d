/**
 * An outside verb on many workflow runs (at most 500 a call), each run through its own guarded
 * transition, a few at a time.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { toDatabaseError } from "../../Database.ts"
import { BULK_LIMIT, type Change, type Deps, type View } from "../Deps.ts"
import type { BulkResult } from "../Model.ts"
import { InvalidRequest, type OperationsError } from "../OperationsError.ts"
import { type ActVerb, DONE, type VerbInput } from "./Actions.ts"
import { queryOf, type RunFilter, type RunLookup, validateFilter } from "./Runs.ts"

/** The bulk verbs, over the one-run guarded verb (`perform` of `makeRunActions`). */
export const makeBulkActions = (
  deps: Deps,
  runs: RunLookup,
  perform: (id: string, verb: ActVerb, input: VerbInput, view: View) => Effect.Effect<string, OperationsError>
) => {
  const { workflowSql } = deps
  const { clock } = runs

  /**
   * Runs a verb on many runs: explicit ids (refused over 500) or a filter (its first 500, oldest
   * first; `capped` says more match). Each run goes through its own guarded transition; runs that
   * moved on first (or vanished) count as `alreadyMovedOn` and are left as they are.
   */
  const bulk = (
    verb: ActVerb,
    target: { readonly ids?: ReadonlyArray<string> | undefined; readonly filter?: RunFilter | undefined },
    input: Change & { readonly cancelChildren?: boolean | undefined },
    view: View = {}
  ): Effect.Effect<BulkResult, OperationsError> =>
    Effect.gen(function* () {
      if (verb === "resume_at" || verb === "reschedule") {
        return yield* new InvalidRequest({ reason: `${verb} is not a bulk verb` })
      }
      if (input.cancelChildren === true && verb !== "cancel") {
        return yield* new InvalidRequest({ reason: "cancelChildren goes with cancel only" })
      }
      let ids: ReadonlyArray<string>
      let capped = false
      if (target.ids !== undefined) {
        if (target.ids.length > BULK_LIMIT) {
          return yield* new InvalidRequest({
            reason: `at most ${BULK_LIMIT} runs per call (got ${target.ids.length}); split the call or use a filter`
          })
        }
        ids = target.ids
      } else if (target.filter !== undefined) {
        yield* validateFilter(target.filter)
        const rows = yield* workflowSql
          .runIdsMatching(queryOf(target.filter, view), yield* clock, BULK_LIMIT + 1)
          .pipe(Effect.mapError(toDatabaseError("select workflow runs")))
        capped = rows.length > BULK_LIMIT
        ids = rows.slice(0, BULK_LIMIT).map((r) => r.id)
      } else {
        return yield* new InvalidRequest({ reason: "give ids or a filter" })
      }
      let moved = 0
      let movedOn = 0
      let failed = 0
      // each run in its own transaction, a few at a time (a pool's worth would starve other callers)
      yield* Effect.forEach(
        ids,
        (id) =>
          Effect.flatMap(Effect.result(perform(id, verb, input, view)), (result) => {
            if (result._tag === "Success") moved++
            else if (result.failure._tag === "Conflict" || result.failure._tag === "NotFound") movedOn++
            else {
              failed++
              return Effect.logWarning(`pgbus: bulk ${verb} of run ${id} failed`, result.failure)
            }
            return Effect.void
          }),
        { concurrency: 4, discard: true }
      )
      return {
        requested: ids.length,
        moved,
        alreadyMovedOn: movedOn,
        failed,
        capped,
        summary: `${DONE[verb]} ${moved}${movedOn > 0 ? `; ${movedOn} had already moved on` : ""}${failed > 0 ? `; ${failed} failed (see the log)` : ""}${capped ? "; more match: call again" : ""}`
      }
    })

  return { bulk }
}
