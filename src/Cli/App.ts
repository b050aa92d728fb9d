/**
 * The app module of `pgbus start --app MODULE`: a module whose default export (or export
 * named `registry`) is a `Registry` layer, `Registry.layer([...jobs])`. It is loaded with a
 * dynamic `import()` of its absolute path, so under `bin/pgbus.mjs` (tsx) it may be TypeScript.
 *
 * @since 0.1.0
 */
import { resolve as resolvePath } from "node:path"
import { pathToFileURL } from "node:url"
import { Effect, Layer } from "effect"
import type { AccessOptions } from "../Http/Access.ts"
import type { PgBus } from "../PgBus.ts"
import type { Registry } from "../Registry.ts"
import { AppModuleError } from "./CliError.ts"

/**
 * A registry layer as an app module exports it. It may need only what `PgBus.layer` provides;
 * an app provides its own services into it (`Registry.layer(jobs).pipe(Layer.provide(...))`).
 */
export type AppRegistry = Layer.Layer<Registry, unknown, PgBus>

const isRecord = (u: unknown): u is Readonly<Record<string, unknown>> => typeof u === "object" && u !== null

const describe = (error: unknown): string => (error instanceof Error ? error.message : String(error))

/** Loads an app module (a path, relative to `cwd`) and returns its Registry layer. */
export const loadRegistry = (module: string, cwd: string = process.cwd()): Effect.Effect<AppRegistry, AppModuleError> =>
  Effect.gen(function* () {
    const href = pathToFileURL(resolvePath(cwd, module)).href
    const loaded: unknown = yield* Effect.tryPromise({
      try: () => import(href),
      catch: (error) => new AppModuleError({ module, reason: describe(error) })
    })
    if (!isRecord(loaded)) return yield* new AppModuleError({ module, reason: "it is not an ES module" })
    const candidate = Layer.isLayer(loaded.default) ? loaded.default : loaded.registry
    if (!Layer.isLayer(candidate)) {
      return yield* new AppModuleError({
        module,
        reason: "its default export (or export `registry`) must be a Registry layer: Registry.layer([...jobs])"
      })
    }
    // A Layer's types are erased at run time: the module's contract says what it is.
    return candidate as AppRegistry
  }).pipe(Effect.withSpan("pgbus.cli.loadRegistry", { attributes: { module } }))

/**
 * Loads the access hooks of `pgbus dashboard --auth MODULE`: a module whose default export (or
 * export named `access`) is `{ authorize?, resolveContext? }`, the same hooks the JSON API and the
 * mounted dashboard take.
 */
export const loadAccess = (module: string, cwd: string = process.cwd()): Effect.Effect<AccessOptions, AppModuleError> =>
  Effect.gen(function* () {
    const href = pathToFileURL(resolvePath(cwd, module)).href
    const loaded: unknown = yield* Effect.tryPromise({
      try: () => import(href),
      catch: (error) => new AppModuleError({ module, reason: describe(error) })
    })
    if (!isRecord(loaded)) return yield* new AppModuleError({ module, reason: "it is not an ES module" })
    const candidate = isRecord(loaded.default) ? loaded.default : loaded.access
    const isHook = (u: unknown) => u === undefined || typeof u === "function"
    if (!isRecord(candidate) || !isHook(candidate.authorize) || !isHook(candidate.resolveContext)) {
      return yield* new AppModuleError({
        module,
        reason: "its default export (or export `access`) must be { authorize?, resolveContext? } (functions)"
      })
    }
    // the hooks' types are erased at run time: the module's contract says what they are
    return candidate as AccessOptions
  })
