/** Where a job is: its queue and its message id there. */
export interface JobRef {
  /** The physical-less queue name the job was sent to (a priority sub-queue included). */
  readonly queue: string
  readonly msgId: bigint
  /** `<queue>:<msgId>`, for logs and the CLI. */
  readonly id: string
}

/** Makes a `JobRef`. */
export const jobRef = (queue: string, msgId: bigint): JobRef => ({ queue, msgId, id: `${queue}:${msgId}` })
