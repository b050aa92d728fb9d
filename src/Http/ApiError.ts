/**
 * The JSON API's error responses, as seed 004 lists them: `{ error, message, ... }` with the
 * status of each. `409` carries the run's current status and the verbs it allows.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * 400: the query, path or body does not decode, or the operation refused the request.
 *
 * @category errors
 */
export class ApiBadRequest extends Schema.TaggedError<ApiBadRequest>()(
  "BadRequest",
  {
    error: Schema.Literal("validation"),
    message: Schema.String,
    issues: Schema.optionalKey(Schema.Array(Schema.String))
  },
  { httpApiStatus: 400 }
) {}

/**
 * 401: the app's `resolveContext` or `authorize` hook refused the request.
 *
 * @category errors
 */
export class ApiUnauthorized extends Schema.TaggedError<ApiUnauthorized>()(
  "Unauthorized",
  { error: Schema.Literal("unauthorized"), message: Schema.String },
  { httpApiStatus: 401 }
) {}

/**
 * 403: a write route without an authorization hook (closed by default), a caller whose role
 * may not write, or a tenant-scoped caller on a cluster-wide route.
 *
 * @category errors
 */
export class ApiForbidden extends Schema.TaggedError<ApiForbidden>()(
  "Forbidden",
  { error: Schema.Literal("forbidden"), message: Schema.String },
  { httpApiStatus: 403 }
) {}

/**
 * 404: unknown queue, job, dead letter, run (or another tenant's) or batch.
 *
 * @category errors
 */
export class ApiNotFound extends Schema.TaggedError<ApiNotFound>()(
  "NotFound",
  { error: Schema.Literal("not_found"), message: Schema.String },
  { httpApiStatus: 404 }
) {}

/**
 * 409: the verb is not allowed from the run's state, or the run is not in the expected status.
 *
 * @category errors
 */
export class ApiConflict extends Schema.TaggedError<ApiConflict>()(
  "Conflict",
  {
    error: Schema.Literal("conflict"),
    message: Schema.String,
    verb: Schema.String,
    /** The run's status now. */
    status: Schema.String,
    allowed: Schema.Array(Schema.String)
  },
  { httpApiStatus: 409 }
) {}

/**
 * 500: anything else (the error is in the log).
 *
 * @category errors
 */
export class ApiInternal extends Schema.TaggedError<ApiInternal>()(
  "Internal",
  { error: Schema.Literal("internal"), message: Schema.String },
  { httpApiStatus: 500 }
) {}

/** The errors of a read route. */
export const ReadErrors = [ApiBadRequest, ApiForbidden, ApiNotFound, ApiInternal] as const

/** The errors of a write route. */
export const WriteErrors = [ApiBadRequest, ApiForbidden, ApiNotFound, ApiConflict, ApiInternal] as const
