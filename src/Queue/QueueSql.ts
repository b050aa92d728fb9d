/**
 * Every SQL statement on queue tables: the registry (`<schema>.queues`) and each queue's
 * message table `q_<queue>` and archive `a_<queue>`. Nothing else in the code base touches
 * them. Queue names reach this module validated (see `QueueName.ts`); they are still bound
 * as quoted identifiers, never spliced as text.
 *
 * Time: every statement takes `$now` and uses `coalesce($now, now())`, so production uses the
 * database's clock and tests can bind TestClock's.
 *
 * @since 0.1.0
 */
import type { SqlClient } from "effect/sql"
import { makeQueueAckSql } from "./QueueAckSql.ts"
import { makeQueueClaimSql } from "./QueueClaimSql.ts"
import { makeQueueDeadLetterSql } from "./QueueDeadLetterSql.ts"
import { makeQueueEnqueueSql } from "./QueueEnqueueSql.ts"
import { makeQueueLimitSql } from "./QueueLimitSql.ts"
import { makeQueueLookupSql } from "./QueueLookupSql.ts"
import { makeQueueRegistrySql } from "./QueueRegistrySql.ts"
import { makeQueueSqlContext } from "./QueueSqlContext.ts"

/**
 * Builds the statements for one schema. Each function returns an Effect running one
 * statement (so that it joins the caller's transaction when one is open). The statements live
 * in one module per family (registry, enqueue, claim, flow control, acknowledgement,
 * dead letters, lookups); this is their one set.
 */
export const makeQueueSql = (sql: SqlClient.SqlClient, schema: string, notifyChannel: string) => {
  const context = makeQueueSqlContext(sql, schema, notifyChannel)
  return {
    ...makeQueueRegistrySql(context),
    ...makeQueueEnqueueSql(context),
    ...makeQueueClaimSql(context),
    ...makeQueueLimitSql(context),
    ...makeQueueAckSql(context),
    ...makeQueueDeadLetterSql(context),
    ...makeQueueLookupSql(context)
  }
}

/** The statements of one schema. */
export type QueueSql = ReturnType<typeof makeQueueSql>
