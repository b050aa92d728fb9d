/**
 * `Workflow.patched(id)`: a recorded marker takes the patched path, another recorded step the old
 * one; a run reaching it past its history records the marker (the history cursor decides).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { statementNow } from "../../Database.ts"
import { isStorableText } from "../../internal/storable.ts"
import * as HistoryCursor from "../HistoryCursor.ts"
import type { WorkflowRuntime } from "../Runtime.ts"
import { InvalidWorkflowDefinition } from "../WorkflowError.ts"
import type { VerbEnv } from "./Env.ts"

/** The body's `patched`, on one execution. */
export const makePatchedVerb = ({ ctx, st, apply }: VerbEnv) => {
  const { statements, db } = ctx
  const { def, runId, namesSeen } = st
  const { halt, restartFromClaim, pauseWith } = apply
  const patched: WorkflowRuntime["Service"]["patched"] = (id) =>
    Effect.gen(function* () {
      if (st.stop !== undefined) return yield* halt(st.stop)
      if (st.speculative) return yield* restartFromClaim
      if (typeof id !== "string" || !isStorableText(id)) {
        yield* pauseWith(
          new InvalidWorkflowDefinition({
            workflow: def.name,
            reason: `a patch id must be a string without a NUL character or a lone surrogate`
          }),
          "error"
        )
        return yield* halt({ _tag: "applied" })
      }
      const marker = HistoryCursor.markerOf(id)
      const found = HistoryCursor.patch(st.replay, id)
      if (found === "recorded") {
        namesSeen.push(marker)
        return true
      }
      if (found === "unpatched") return false
      // the run reaches the patch new: record the marker, so that replays take this path
      const now = yield* statementNow
      yield* statements
        .markerInsert({ runId, name: marker, position: st.replay.position, now })
        .pipe(db("record patch"))
      HistoryCursor.recordMarker(st.replay, id)
      namesSeen.push(marker)
      return true
    }).pipe(Effect.orDie)
  return patched
}
