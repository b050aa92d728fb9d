/**
 * The workflow transition table: the one rule for which verb is legal in which state. The
 * runner, the sweep, the outside verbs, `availableActions` and the docs read it.
 *
 * @since 0.1.0
 */

/** States of a run: four ongoing, two terminal. */
export const RunStatuses = ["ready", "performing", "waiting", "paused", "finished", "cancelled"] as const
export type RunStatus = (typeof RunStatuses)[number]

/** The ongoing states (one ongoing run per workflow and subject). */
export const OngoingStatuses: ReadonlyArray<RunStatus> = ["ready", "performing", "waiting", "paused"]

/**
 * The states a singleton workflow's run holds its slot in (the partial unique index of
 * migration 0019 says the same): a paused run releases it, and its resume takes it again.
 */
export const SingletonHeldStatuses: ReadonlyArray<RunStatus> = ["ready", "performing", "waiting"]

/** The step states an attempt is open in (a run has at most one open attempt). */
export const OpenStepStatuses = ["scheduled", "in_progress", "waiting"] as const

/** States of a step attempt. */
export const StepStatuses = [
  "scheduled",
  "waiting",
  "in_progress",
  "completed",
  "failed",
  "cancelled",
  "skipped"
] as const
export type StepStatus = (typeof StepStatuses)[number]

/** A row of the table. */
export interface Transition<Verb extends string = string> {
  readonly verb: Verb
  readonly from: ReadonlyArray<RunStatus>
  /** The state after; `"unchanged"` for verbs that keep the state. */
  readonly to: RunStatus | "unchanged"
  readonly steps: string
}

/** Verbs people and code call from outside a run. */
export const OutsideVerbs = [
  "pause",
  "resume",
  "resume_at",
  "cancel",
  "run_now",
  "reschedule",
  "rerun",
  "skip",
  "signal"
] as const
export type OutsideVerb = (typeof OutsideVerbs)[number]

/** The runner's and the sweep's own moves, never offered as actions. */
export const InternalVerbs = [
  "claim",
  "advance",
  "finish",
  "reattempt",
  "step_pause",
  "step_cancel",
  "unpause",
  "hold",
  "park",
  "wake",
  "resolve",
  "rewait",
  "notice_pause",
  "delivery_pause",
  "start",
  "begin",
  "schedule",
  "end_finish",
  "end_pause",
  "end_cancel",
  "release",
  "wake_claim",
  "poll",
  "wait_skip",
  "wait_pause",
  "wait_cancel",
  "notice"
] as const
export type InternalVerb = (typeof InternalVerbs)[number]

export type Verb = OutsideVerb | InternalVerb

/** The outside verbs. */
export const outsideTransitions: ReadonlyArray<Transition<OutsideVerb>> = [
  {
    verb: "pause",
    from: ["ready", "performing", "waiting"],
    to: "paused",
    steps: "a running step finishes and records its outcome; nothing new is claimed"
  },
  {
    verb: "resume",
    from: ["paused"],
    to: "ready",
    steps:
      "a failed step runs again as a new attempt; a completed or skipped one is followed by the next step; a scheduled one is sent again; a waiting one waits again"
  },
  { verb: "resume_at", from: ["paused"], to: "ready", steps: "the named step runs as a new attempt" },
  {
    verb: "cancel",
    from: ["ready", "performing", "waiting", "paused"],
    to: "cancelled",
    steps: "scheduled and in_progress steps are cancelled; a running step's outcome is ignored"
  },
  { verb: "run_now", from: ["ready"], to: "ready", steps: "the scheduled step's wait is cut short and it is sent now" },
  { verb: "reschedule", from: ["ready"], to: "ready", steps: "the scheduled step moves to the given time" },
  {
    verb: "rerun",
    from: ["finished", "cancelled"],
    to: "ready",
    steps: "a new run starts with the same subject and payload"
  },
  {
    verb: "skip",
    from: ["waiting"],
    to: "ready",
    steps:
      "the waiting step is skipped (a signal it holds is consumed) and the next step is scheduled, or the run finishes after the last"
  },
  {
    verb: "signal",
    from: ["ready", "performing", "waiting", "paused"],
    to: "unchanged",
    steps:
      "the signal is stored; a waiting step it matches is scheduled again, otherwise it stays pending until a step claims it"
  }
]

/** The runner's and the sweep's moves. */
export const internalTransitions: ReadonlyArray<Transition<InternalVerb>> = [
  { verb: "claim", from: ["ready"], to: "performing", steps: "the scheduled step moves to in_progress" },
  {
    verb: "advance",
    from: ["performing"],
    to: "ready",
    steps: "the step is completed or skipped and the next step is scheduled"
  },
  {
    verb: "finish",
    from: ["performing", "paused"],
    to: "finished",
    steps: "the last step (or one that called finish) completed"
  },
  { verb: "reattempt", from: ["performing"], to: "ready", steps: "the step failed and its next attempt is scheduled" },
  {
    verb: "step_pause",
    from: ["performing"],
    to: "paused",
    steps: "the step completed after pause, or failed (an error or a stall)"
  },
  {
    verb: "step_cancel",
    from: ["performing", "paused"],
    to: "cancelled",
    steps: "the step called cancel, or cancelIf or a policy cancelled it"
  },
  {
    verb: "unpause",
    from: ["paused"],
    to: "performing",
    steps: "resume while the step that was running at the outside pause is still running: the run goes on performing it"
  },
  {
    verb: "hold",
    from: ["paused"],
    to: "paused",
    steps:
      "an outcome that arrived after an outside pause: recorded on the step; a completed, skipped or reattempted step has its next row scheduled; the run stays paused"
  },
  {
    verb: "park",
    from: ["performing"],
    to: "waiting",
    steps: "the step waits for a matching signal, a timer or its fan-out batch; nothing is sent until it is woken"
  },
  {
    verb: "wake",
    from: ["waiting"],
    to: "ready",
    steps:
      "a matching signal arrived, a timer fell due, or the wait timed out with onTimeout run: the step is scheduled again"
  },
  {
    verb: "resolve",
    from: ["waiting"],
    to: "performing",
    steps:
      "the fan-out batch finished, the wait timed out, or an operator skipped the step: its outcome is applied as for a finished attempt"
  },
  {
    verb: "rewait",
    from: ["paused"],
    to: "waiting",
    steps: "resume on a run paused while its step was waiting: it waits again"
  },
  {
    verb: "notice_pause",
    from: ["waiting"],
    to: "paused",
    steps:
      "a per-run notify deadline failed when evaluated again at a late notice: the notice is recorded and the step keeps waiting (resume rewaits, with no deadline)"
  },
  {
    verb: "delivery_pause",
    from: ["ready"],
    to: "paused",
    steps:
      "the run's message failed on its last delivery (no worker that read it has the workflow registered, or its execution failed every time): the run pauses as undeliverable with the error; resume sends it again"
  },
  { verb: "start", from: [], to: "ready", steps: "a new run is inserted with its first message (a start or a rerun)" },
  {
    verb: "begin",
    from: ["performing"],
    to: "unchanged",
    steps: "the replay of a run claimed without a step reached a new step that is due: it is inserted in_progress"
  },
  {
    verb: "schedule",
    from: ["performing"],
    to: "ready",
    steps: "the replay of a run claimed without a step reached a new step that is not due yet: it is scheduled"
  },
  {
    verb: "end_finish",
    from: ["performing"],
    to: "finished",
    steps: "the replay of a run claimed without a step reached the body's end: the run finishes"
  },
  {
    verb: "end_pause",
    from: ["performing"],
    to: "paused",
    steps: "the replay of a run claimed without a step failed or called pause: the run pauses"
  },
  {
    verb: "end_cancel",
    from: ["performing"],
    to: "cancelled",
    steps: "the replay of a run claimed without a step called cancel: the run is cancelled"
  },
  {
    verb: "release",
    from: ["performing"],
    to: "ready",
    steps: "a run claimed without a step whose worker gave it up before writing a step: it waits for its next claim"
  },
  {
    verb: "wake_claim",
    from: ["waiting"],
    to: "performing",
    steps: "a signal wakes the step for a local reader: woken and claimed (in_progress) in one statement"
  },
  {
    verb: "poll",
    from: ["performing"],
    to: "ready",
    steps: "a poll found nothing yet: the attempt is scheduled again for its next check (a paused run holds)"
  },
  {
    verb: "wait_skip",
    from: ["waiting"],
    to: "ready",
    steps:
      "an outside skip or a wait timed out with onTimeout skip: the waiting step is skipped and a continue message sent (a paused run holds)"
  },
  {
    verb: "wait_pause",
    from: ["waiting", "paused"],
    to: "paused",
    steps: "a wait timed out with onTimeout pause: the waiting step fails and the run pauses"
  },
  {
    verb: "wait_cancel",
    from: ["waiting", "paused"],
    to: "cancelled",
    steps: "a wait timed out with onTimeout cancel: the waiting step and the run are cancelled"
  },
  {
    verb: "notice",
    from: ["waiting"],
    to: "unchanged",
    steps:
      "a notify wait's deadline passed: the notice is recorded and the deadline moves on (a per-run deadline is handed to a worker to evaluate again)"
  }
]

/** The moves that apply an attempt's outcome: one statement binds them all (their from-states' union). */
export const StepOutcomeVerbs: ReadonlyArray<InternalVerb> = [
  "advance",
  "finish",
  "reattempt",
  "step_pause",
  "step_cancel",
  "hold"
]

/** Every row, outside verbs first. */
export const transitions: ReadonlyArray<Transition<Verb>> = [...outsideTransitions, ...internalTransitions]

const byVerb = new Map<string, Transition<Verb>>(transitions.map((t) => [t.verb, t]))

/** The row of a verb. */
export const transitionOf = (verb: Verb): Transition<Verb> => byVerb.get(verb)!

/** Whether a verb is legal from a state. */
export const isLegal = (verb: Verb, from: RunStatus): boolean => transitionOf(verb).from.includes(from)

/** The states a verb may start from (what a guarded UPDATE binds). */
export const fromStates = (verb: Verb): ReadonlyArray<RunStatus> => transitionOf(verb).from

/** The union of the verbs' from-states, in the table's order of states. */
export const fromStatesOf = (verbs: ReadonlyArray<Verb>): ReadonlyArray<RunStatus> =>
  RunStatuses.filter((status) => verbs.some((verb) => isLegal(verb, status)))

/** The state a verb leads to from `from` (the same state for `unchanged`). */
export const targetOf = (verb: Verb, from: RunStatus): RunStatus => {
  const to = transitionOf(verb).to
  return to === "unchanged" ? from : to
}

/** The outside verbs a run in `status` allows. */
export const availableActions = (status: RunStatus): ReadonlyArray<OutsideVerb> =>
  outsideTransitions.filter((t) => t.from.includes(status)).map((t) => t.verb)

/** Whether a status is terminal. */
export const isTerminal = (status: RunStatus): boolean => status === "finished" || status === "cancelled"

/** The table as Markdown, as docs/workflows.md shows it (a test keeps the two equal). */
export const toMarkdown = (): string => {
  const table = (rows: ReadonlyArray<Transition>) =>
    [
      "| Verb | From | To | Steps |",
      "| --- | --- | --- | --- |",
      ...rows.map(
        (t) =>
          `| \`${t.verb}\` | ${t.from.length === 0 ? "(new run)" : t.from.join(", ")} | ${t.to === "unchanged" ? "(unchanged)" : t.to} | ${t.steps} |`
      )
    ].join("\n")
  return [
    "The outside verbs:",
    "",
    table(outsideTransitions),
    "",
    "The runner's and the sweep's own moves, never offered as actions:",
    "",
    table(internalTransitions)
  ].join("\n")
}
