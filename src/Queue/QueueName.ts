/**
 * Queue names. A queue's name becomes part of its table names, so it is validated before any
 * SQL: lowercase letters, digits and underscores, starting with a letter, bounded length.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { IDENTIFIER_PATTERN } from "../Config.ts"
import { InvalidQueueName } from "./QueueError.ts"

/**
 * Longest physical name (`<prefix>_<queue>`) of a queue: its dead-letter queue adds `_dlq`,
 * and `q_` + that + an index suffix must stay inside PostgreSQL's 63-byte identifiers.
 */
export const MAX_PHYSICAL_LENGTH = 43

/** Suffix of a queue's dead-letter queue. */
export const DEAD_LETTER_SUFFIX = "_dlq"

/** A validated queue: the name the app uses and the physical name its tables carry. */
export interface QueueName {
  /** The name as the app gives it, e.g. `mailers` or `mailers_dlq`. */
  readonly name: string
  /** `<prefix>_<name>`: the name of the tables `q_<physical>` and `a_<physical>`. */
  readonly physical: string
}

/** The physical name of a queue under a prefix (`<prefix>_<name>`): the one place it is built. */
export const physicalOf = (prefix: string, name: string): string => `${prefix}_${name}`

/** Checks a queue name against the rule, for the given prefix. */
export const validate = (name: unknown, prefix: string): Effect.Effect<QueueName, InvalidQueueName> => {
  if (typeof name !== "string") {
    return Effect.fail(new InvalidQueueName({ name: String(name), rule: "must be a string" }))
  }
  if (!IDENTIFIER_PATTERN.test(name)) {
    return Effect.fail(
      new InvalidQueueName({
        name,
        rule: "must start with a lowercase letter and contain only lowercase letters, digits and underscores"
      })
    )
  }
  const physical = physicalOf(prefix, name)
  const limit = MAX_PHYSICAL_LENGTH + (name.endsWith(DEAD_LETTER_SUFFIX) ? DEAD_LETTER_SUFFIX.length : 0)
  if (physical.length > limit) {
    return Effect.fail(
      new InvalidQueueName({
        name,
        rule: `must have at most ${limit - prefix.length - 1} characters (with the prefix ${prefix}_)`
      })
    )
  }
  return Effect.succeed({ name, physical })
}

/** The dead-letter queue of a queue (`<queue>_dlq`). */
export const deadLetterOf = (queue: QueueName): QueueName => ({
  name: `${queue.name}${DEAD_LETTER_SUFFIX}`,
  physical: `${queue.physical}${DEAD_LETTER_SUFFIX}`
})

/** Whether a queue is itself a dead-letter queue. */
export const isDeadLetter = (queue: QueueName): boolean => queue.name.endsWith(DEAD_LETTER_SUFFIX)

/** The app-facing name of a physical name under a prefix, if it carries that prefix. */
export const fromPhysical = (physical: string, prefix: string): string | undefined => {
  const head = physicalOf(prefix, "")
  return physical.startsWith(head) ? physical.slice(head.length) : undefined
}
