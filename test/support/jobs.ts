/** Helpers for job tests: run a supervisor in the test's scope, wait for conditions. */
import { Duration, Effect, Schedule } from "effect"
import type { AnyJob } from "../../src/Job/Job.ts"
import { Registry } from "../../src/Registry.ts"
import * as Supervisor from "../../src/Supervisor/Supervisor.ts"
import type { AnyWorkflow } from "../../src/Workflow/Workflow.ts"

/** Starts a supervisor for these jobs in the current scope; it drains when the scope closes. */
export const startSupervisor = <const Jobs extends ReadonlyArray<AnyJob | AnyWorkflow>>(
  jobs: Jobs,
  options: Supervisor.SupervisorOptions = {}
) => Supervisor.runWith(options).pipe(Effect.provide(Registry.layer(jobs)), Effect.forkScoped)

/** Polls `check` until it returns true, at most `timeout`. Fails the test otherwise. */
export const eventually = <E, R>(
  what: string,
  check: Effect.Effect<boolean, E, R>,
  timeout: Duration.Input = "10 seconds"
) =>
  check.pipe(
    Effect.repeat({ until: (ok) => ok, schedule: Schedule.spaced("20 millis") }),
    Effect.timeoutOrElse({
      duration: timeout,
      orElse: () => Effect.die(new Error(`timed out waiting for: ${what}`))
    }),
    Effect.asVoid
  )

export const ms = (d: Duration.Input) => Duration.toMillis(Duration.fromInputUnsafe(d))
