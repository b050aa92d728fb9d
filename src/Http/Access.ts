/**
 * Who calls the JSON API, decided by the app's hooks: `resolveContext` maps a request to the
 * tenant (`resourceId`) every read and verb is scoped by, `authorize` to the caller and its
 * role. Closed by default: without `authorize` every caller is an anonymous reader (payloads
 * redacted) and write routes answer 403. A hook that fails answers 401.
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, type Types } from "effect"
import { HttpServerRequest } from "effect/http"
import { HttpApiError, HttpApiMiddleware } from "effect/http-api"
import { ApiBadRequest, ApiForbidden, ApiUnauthorized } from "./ApiError.ts"

/** What `authorize` says of a caller. */
export interface Authorization {
  /** Recorded on the audit trail as `api:<actor>`. */
  readonly actor: string
  /** `read` sees; `write` also acts (verbs, pause, purge, retry). */
  readonly role: "read" | "write"
  /** Show payloads, outputs and error text (default: only to the `write` role). */
  readonly payloads?: boolean | undefined
}

/** The hooks an app gives the API. */
export interface AccessOptions {
  /** The caller's tenant: every workflow read and verb is scoped to it. Fail to answer 401. */
  readonly resolveContext?:
    | ((
        request: HttpServerRequest.HttpServerRequest
      ) => Effect.Effect<{ readonly resourceId?: string | undefined }, unknown>)
    | undefined
  /** The caller and its role. Fail to answer 401. Without it, writes answer 403. */
  readonly authorize?:
    | ((request: HttpServerRequest.HttpServerRequest) => Effect.Effect<Authorization, unknown>)
    | undefined
}

/** The caller of the current request. */
export interface CallerShape {
  readonly actor: string
  readonly canWrite: boolean
  readonly payloads: boolean
  readonly resourceId: string | undefined
  /** Why writes are refused, when they are. */
  readonly writeRefusal: string | undefined
}

/**
 * The caller of the current request (provided by the `ApiAccess` middleware).
 *
 * @category services
 */
export class Caller extends Context.Service<Caller, CallerShape>()("effect-pgbus/Http/Caller") {}

/**
 * The middleware every route of the API goes through: runs the hooks and turns request
 * decoding failures into `400 { error: "validation" }`.
 *
 * @category middleware
 */
export class ApiAccess extends HttpApiMiddleware.Service<ApiAccess, { provides: Caller }>()(
  "effect-pgbus/Http/ApiAccess",
  { error: [ApiUnauthorized, ApiBadRequest] }
) {}

const describe = (error: unknown): string =>
  typeof error === "object" && error !== null && "message" in error && typeof error.message === "string"
    ? error.message
    : String(error)

/** The caller of a request, from the hooks (401 when one fails). */
export const resolveCaller = (
  options: AccessOptions,
  request: HttpServerRequest.HttpServerRequest
): Effect.Effect<CallerShape, ApiUnauthorized> =>
  Effect.gen(function* () {
    const unauthorized = (error: unknown) =>
      Effect.fail(new ApiUnauthorized({ error: "unauthorized", message: describe(error) || "unauthorized" }))
    const context = options.resolveContext
      ? yield* options.resolveContext(request).pipe(Effect.catchCause((cause) => unauthorized(cause.toString())))
      : {}
    if (options.authorize === undefined) {
      return {
        actor: "anonymous",
        canWrite: false,
        payloads: false,
        resourceId: context.resourceId,
        writeRefusal: "write routes are closed: the app provides no authorize hook"
      }
    }
    const who = yield* options.authorize(request).pipe(
      Effect.catch((error) => unauthorized(error)),
      Effect.catchDefect((defect) => unauthorized(defect))
    )
    return {
      actor: who.actor,
      canWrite: who.role === "write",
      payloads: who.payloads ?? who.role === "write",
      resourceId: context.resourceId,
      writeRefusal: who.role === "write" ? undefined : `${who.actor} may read, not write`
    }
  })

/** The middleware's implementation for the given hooks. */
export const layerAccess = (options: AccessOptions): Layer.Layer<ApiAccess> =>
  Layer.succeed(ApiAccess, (httpEffect) =>
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      const caller = yield* resolveCaller(options, request)
      return yield* httpEffect.pipe(
        Effect.provideService(Caller, caller),
        Effect.catch((error): Effect.Effect<never, ApiBadRequest | Types.unhandled> => {
          const failure: unknown = error
          return HttpApiError.HttpApiSchemaError.is(failure)
            ? Effect.fail(
                new ApiBadRequest({
                  error: "validation",
                  message: `invalid ${failure.kind.toLowerCase()}`,
                  issues: [failure.cause.message]
                })
              )
            : Effect.fail(error)
        })
      )
    })
  )

/** Fails with 403 unless the caller may write. */
export const requireWrite: Effect.Effect<CallerShape, ApiForbidden, Caller> = Effect.flatMap(Caller, (caller) =>
  caller.writeRefusal === undefined
    ? Effect.succeed(caller)
    : Effect.fail(new ApiForbidden({ error: "forbidden", message: caller.writeRefusal }))
)

/** Fails with 403 for a tenant-scoped caller (cluster-wide routes show every tenant's data). */
export const requireClusterWide: Effect.Effect<CallerShape, ApiForbidden, Caller> = Effect.flatMap(Caller, (caller) =>
  caller.resourceId === undefined
    ? Effect.succeed(caller)
    : Effect.fail(
        new ApiForbidden({ error: "forbidden", message: "a tenant-scoped caller sees only its workflow runs" })
      )
)
