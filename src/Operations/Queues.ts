/**
 * Queues and jobs for operators: each queue's figures and state in words, pause / resume /
 * purge, and jobs listed by state. A queue name is the app's; with priorities on, a verb on
 * `mailers` acts on each of its sub-queues (`mailers_p0`, ...). The families live in `queues/`:
 * `Summaries` (figures, look-ups by name), `Controls` (pause, resume, purge, blocked keys),
 * `Jobs` (list, read, retry, discard), `QueueErrors` (how queue failures answer).
 *
 * @since 0.1.0
 */
import type { Deps } from "./Deps.ts"
import { makeQueueControls } from "./queues/Controls.ts"
import { makeQueueJobs } from "./queues/Jobs.ts"
import { makeQueueSummaries } from "./queues/Summaries.ts"

export { errorViewOf, jobNameOf } from "./queues/Jobs.ts"
export { fromQueueError } from "./queues/QueueErrors.ts"

/** The operators' queue operations. */
export const makeQueues = (deps: Deps) => {
  const summaries = makeQueueSummaries(deps)
  const { queues, queue, figuresOf, registered } = summaries
  const { pauseQueue, resumeQueue, purgeQueue, blockedKeys, releaseKey } = makeQueueControls(deps, summaries)
  const { jobs, job, retryJob, discardJob } = makeQueueJobs(deps)
  return {
    queues,
    queue,
    pauseQueue,
    resumeQueue,
    purgeQueue,
    jobs,
    job,
    retryJob,
    discardJob,
    blockedKeys,
    releaseKey,
    figuresOf,
    registered
  }
}
