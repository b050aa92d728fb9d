/**
 * Claims commit without waiting for the WAL flush (issue 24, item 2). A claim is a lease: if
 * the server crashes before its commit reaches disk, the claim is lost and the message is
 * simply visible again (redelivered, at least once, as after any crash), so the claim need not
 * pay for an fsync (3-4 ms here, more while other commits queue for the flush). The next
 * synchronous commit of any session flushes the WAL up to it, so a job's durable outcome is
 * never on disk without its claim.
 *
 * `set_config(..., true)` lasts until the end of the transaction: put in a statement that runs
 * as its own transaction (autocommit), it turns off `synchronous_commit` for that commit only.
 * Never use it in a statement that may run inside a caller's transaction: the caller's whole
 * commit would lose its durability.
 *
 * @since 0.1.0
 */

/** A condition that is always true and turns off `synchronous_commit` for this transaction (a WHERE clause's). */
export const LEASE_COMMIT = "(SELECT set_config('synchronous_commit', 'off', true)) = 'off'"
