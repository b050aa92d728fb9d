/**
 * Running the `pgbus` command line: `run(argv)` is an Effect that prints through Effect's
 * `Console` and produces the exit code (0 on success, 1 for any expected failure, whose
 * message is printed without a stack trace); `capture(argv)` runs it in-process with the
 * output collected (tests); `exitCodeOf` is the process's exit code for `NodeRuntime.runMain`.
 *
 * @since 0.1.0
 */
import { format } from "node:util"
import { Cause, Console, Effect, Exit, Option } from "effect"
import { CliOutput, Command, CliError as EffectCliError } from "effect/cli"
import { VERSION } from "../version.ts"
import { pgbus, RunState } from "./Commands.ts"

export { RunState } from "./Commands.ts"

/** The services `effect/cli` needs to run (file system, path, terminal, stdio, child processes). */
export type Environment = Command.Environment

/** What a captured run printed and how it ended. */
export interface Captured {
  readonly exitCode: number
  readonly stdout: string
  readonly stderr: string
}

/** The exit code of expected failures. */
export const FAILURE = 1

const messageOf = (error: unknown): string => {
  if (typeof error === "object" && error !== null && "message" in error && typeof error.message === "string") {
    return error.message
  }
  return String(error)
}

/** SQLSTATEs that mean the schema or its tables are missing: the database is not migrated. */
const MISSING_SCHEMA = new Set(["3F000", "42P01"])

const hintFor = (error: unknown): string => {
  if (typeof error !== "object" || error === null || !("_tag" in error)) return ""
  if (error._tag === "DatabaseError" && "sqlState" in error && MISSING_SCHEMA.has(String(error.sqlState))) {
    return " (is the database migrated? run `pgbus migrate`)"
  }
  return ""
}

/** Prints a failure the way the CLI reports it and returns its exit code. */
const report = (error: unknown): Effect.Effect<number> => {
  if (EffectCliError.isCliError(error)) {
    // parse errors and help were already presented by effect/cli
    if (error._tag === "ShowHelp") return Effect.succeed(error.errors.length > 0 ? FAILURE : 0)
    if (error._tag === "UserError") return Effect.succeed(FAILURE)
  }
  return Effect.as(Console.error(`pgbus: ${messageOf(error)}${hintFor(error)}`), FAILURE)
}

/**
 * Runs the CLI on `argv` (without the node and script paths). Never fails: expected errors
 * are printed and become exit code 1. An interruption (SIGTERM/SIGINT) stays an interruption.
 */
export const run = (argv: ReadonlyArray<string>): Effect.Effect<number, never, Environment> =>
  Command.runWith(pgbus, { version: VERSION })(argv).pipe(
    Effect.as(0),
    Effect.catchCause((cause) => {
      if (Cause.hasInterruptsOnly(cause)) return Effect.interrupt
      const error = Cause.findErrorOption(cause)
      if (Option.isSome(error)) return report(error.value)
      return Effect.as(Console.error(`pgbus: unexpected failure\n${Cause.pretty(cause)}`), FAILURE)
    })
  )

/** A `Console` that appends what is logged to `stdout` and what is errored or warned to `stderr`. */
export const captureConsole = (stdout: Array<string>, stderr: Array<string>): Console.Console => {
  const out = (...args: ReadonlyArray<unknown>) => {
    stdout.push(format(...args))
  }
  const err = (...args: ReadonlyArray<unknown>) => {
    stderr.push(format(...args))
  }
  const none = () => {}
  return {
    assert: none,
    clear: none,
    count: none,
    countReset: none,
    debug: out,
    dir: out,
    dirxml: out,
    error: err,
    group: none,
    groupCollapsed: none,
    groupEnd: none,
    info: out,
    log: out,
    table: out,
    time: none,
    timeEnd: none,
    timeLog: none,
    trace: err,
    warn: err
  }
}

/** Runs the CLI in-process with its output captured (no colours): for tests and embedding. */
export const capture = (argv: ReadonlyArray<string>): Effect.Effect<Captured, never, Environment> =>
  Effect.gen(function* () {
    const stdout: Array<string> = []
    const stderr: Array<string> = []
    const exitCode = yield* run(argv).pipe(
      Effect.provideService(Console.Console, captureConsole(stdout, stderr)),
      Effect.provideService(CliOutput.Formatter, CliOutput.defaultFormatter({ colors: false })),
      Effect.provideService(RunState, { supervising: false })
    )
    return { exitCode, stdout: stdout.join("\n"), stderr: stderr.join("\n") }
  })

/**
 * The process exit code of a finished run: its code on completion; after SIGTERM/SIGINT, 0
 * when the supervisor was running (it drained) and 130 otherwise; 1 for anything else.
 */
export const exitCodeOf = (exit: Exit.Exit<unknown, unknown>, state: { readonly supervising: boolean }): number => {
  if (Exit.isSuccess(exit)) return typeof exit.value === "number" ? exit.value : 0
  if (Cause.hasInterruptsOnly(exit.cause)) return state.supervising ? 0 : 130
  return FAILURE
}
