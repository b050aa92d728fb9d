/**
 * One PostgreSQL data folder driven with the embedded binaries: initialise it (initdb, a
 * random password, loopback only, no Unix socket), read whether a server runs on it
 * (`postmaster.pid`), start it on a port, stop it. Beside the folder `<data>` live
 * `<data>.password`, `<data>.log` (the server's log), `<data>.lock` and `<data>.clients/`.
 */
import { createHash, randomBytes } from "node:crypto"
import { appendFile, chmod, chown, mkdir, mkdtemp, readdir, readFile, rm, rmdir, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { Effect, Option } from "effect"
import type { Binaries } from "./Binaries.ts"
import { EmbeddedError } from "./EmbeddedError.ts"
import { isAlive, type OsUser, run } from "./Host.ts"

/** A data folder and the files kept beside it. */
export interface Paths {
  readonly data: string
  readonly password: string
  readonly log: string
  readonly lock: string
  readonly clients: string
}

/** The paths of a data folder (an absolute path). */
export const pathsOf = (data: string): Paths => ({
  data,
  password: `${data}.password`,
  log: `${data}.log`,
  lock: `${data}.lock`,
  clients: `${data}.clients`
})

/** The superuser of the embedded cluster. */
export const SUPERUSER = "postgres"

const describe = (error: unknown) => (error instanceof Error ? error.message : String(error))

const io = <A>(reason: EmbeddedError["reason"], what: string, f: () => Promise<A>) =>
  Effect.tryPromise({ try: f, catch: (error) => new EmbeddedError({ reason, detail: `${what}: ${describe(error)}` }) })

const exists = (path: string) =>
  Effect.promise(() =>
    readFile(path).then(
      () => true,
      () => false
    )
  )

/** The last lines of the server's log, for an error. */
export const logTail = (paths: Paths, lines = 15): Effect.Effect<string> =>
  Effect.promise(() =>
    readFile(paths.log, "utf8")
      .then((text) => text.trimEnd().split("\n").slice(-lines).join("\n"))
      .catch(() => "(no log)")
  )

/** Whether `user` can enter the folder (every parent must be searchable by it). */
const reachable = (folder: string, user: OsUser) =>
  user.uid === undefined
    ? Effect.succeed(true)
    : Effect.map(run("/bin/sh", ["-c", 'cd "$1"', "sh", folder], user), (r) => r.code === 0)

/**
 * Makes the data folder (owned by `user`, mode 0700) and the files beside it. When `user`
 * cannot reach the folder (a project under `/root`, say) the data goes to a folder of its
 * own under `/var/tmp` instead, named after the project's folder, and a log line says so.
 */
export const prepare = (data: string, user: OsUser): Effect.Effect<Paths, EmbeddedError> =>
  Effect.gen(function* () {
    const own = (path: string) =>
      user.uid === undefined ? Effect.void : io("data_folder", `chown ${path}`, () => chown(path, user.uid!, user.gid!))
    // the parents with the usual modes (the server's user must be able to enter them), the folder 0700
    yield* io("data_folder", `cannot create ${data}`, async () => {
      await mkdir(dirname(data), { recursive: true })
      await mkdir(data, { mode: 0o700 }).catch((error: NodeJS.ErrnoException) => {
        if (error.code !== "EEXIST") throw error
      })
    })
    yield* own(data)
    yield* io("data_folder", `chmod ${data}`, () => chmod(data, 0o700))
    let paths = pathsOf(data)
    if (!(yield* reachable(data, user))) {
      const fallback = join(
        "/var/tmp",
        `effect-pgbus-${createHash("sha256").update(data).digest("hex").slice(0, 12)}`,
        "data"
      )
      yield* Effect.logWarning(
        `[pgbus] OS user ${user.name} cannot reach ${data} (a parent folder is not searchable by it): the embedded data goes to ${fallback}`
      )
      // the folder made above stays only if it held something
      yield* Effect.promise(() => rmdir(data).catch(() => undefined))
      yield* io("data_folder", `cannot create ${fallback}`, () => mkdir(fallback, { recursive: true, mode: 0o700 }))
      yield* io("data_folder", `chmod ${dirname(fallback)}`, () => chmod(dirname(fallback), 0o755))
      yield* own(fallback)
      paths = pathsOf(fallback)
    }
    yield* io("data_folder", `cannot create ${paths.clients}`, () => mkdir(paths.clients, { recursive: true }))
    // the server appends its log as `user`
    yield* io("data_folder", `cannot create ${paths.log}`, () => appendFile(paths.log, ""))
    yield* own(paths.log)
    return paths
  })

/** Whether initdb has made the folder a cluster. */
export const isInitialised = (paths: Paths) => exists(join(paths.data, "PG_VERSION"))

/** The superuser's password (made by `initialise`). */
export const password = (paths: Paths) =>
  io("data_folder", `cannot read ${paths.password}`, () => readFile(paths.password, "utf8")).pipe(
    Effect.map((text) => text.trim())
  )

/** Settings appended to postgresql.conf: loopback TCP only, no Unix socket (its path may be too long). */
const SETTINGS = `
# effect-pgbus embedded server
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
`

/**
 * initdb on an empty folder: UTF-8, C locale, scram-sha-256 with a random password kept beside
 * it. `durable: false` skips initdb's fsync (throwaway clusters of tests).
 */
export const initialise = (
  binaries: Binaries,
  paths: Paths,
  user: OsUser,
  { durable = true }: { readonly durable?: boolean } = {}
): Effect.Effect<void, EmbeddedError> =>
  Effect.gen(function* () {
    const entries = yield* io("data_folder", `cannot read ${paths.data}`, () => readdir(paths.data))
    if (entries.length > 0) {
      return yield* new EmbeddedError({
        reason: "data_folder",
        detail: `${paths.data} is neither empty nor a PostgreSQL data folder (no PG_VERSION): move it away`
      })
    }
    const secret = randomBytes(18).toString("base64url")
    yield* io("data_folder", `cannot write ${paths.password}`, () =>
      writeFile(paths.password, `${secret}\n`, { mode: 0o600 })
    )
    // initdb reads the password from a file `user` can read, removed right after
    const scratch = yield* io("data_folder", "cannot make a temporary folder", () =>
      mkdtemp(join(tmpdir(), "pgbus-initdb-"))
    )
    const pwfile = join(scratch, "pw")
    const ran = yield* Effect.ensuring(
      Effect.gen(function* () {
        yield* io("data_folder", "cannot write the password file", () =>
          writeFile(pwfile, `${secret}\n`, { mode: 0o600 })
        )
        if (user.uid !== undefined) {
          yield* io("data_folder", "chown the password file", async () => {
            await chown(scratch, user.uid!, user.gid!)
            await chown(pwfile, user.uid!, user.gid!)
          })
        }
        return yield* run(
          binaries.initdb,
          [
            `--pgdata=${paths.data}`,
            `--username=${SUPERUSER}`,
            `--pwfile=${pwfile}`,
            "--auth=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
            ...(durable ? [] : ["--no-sync"])
          ],
          user
        )
      }),
      Effect.promise(() => rm(scratch, { recursive: true, force: true }))
    )
    if (ran.code !== 0) {
      return yield* new EmbeddedError({
        reason: "initdb_failed",
        detail: `initdb exited ${ran.code}: ${ran.stderr.trim()}`
      })
    }
    yield* io("initdb_failed", "cannot write postgresql.conf", () =>
      appendFile(join(paths.data, "postgresql.conf"), SETTINGS)
    )
  })

/** A server running on the folder: its postmaster's pid, its port and whether it accepts connections. */
export interface Running {
  readonly pid: number
  readonly port: number
  readonly ready: boolean
}

/** The server `postmaster.pid` names, if its process is alive. */
export const running = (paths: Paths): Effect.Effect<Option.Option<Running>> =>
  Effect.promise(() => readFile(join(paths.data, "postmaster.pid"), "utf8").catch(() => "")).pipe(
    Effect.map((text) => {
      const lines = text.split("\n")
      const pid = Number(lines[0])
      const port = Number(lines[3])
      if (!Number.isInteger(pid) || pid <= 0 || !Number.isInteger(port) || !isAlive(pid)) return Option.none()
      return Option.some({ pid, port, ready: (lines[7] ?? "").trim() === "ready" })
    })
  )

/** Starts the server on `port` and waits until it accepts connections. */
export const start = (
  binaries: Binaries,
  paths: Paths,
  user: OsUser,
  port: number
): Effect.Effect<void, EmbeddedError> =>
  Effect.gen(function* () {
    const ran = yield* run(
      binaries.pg_ctl,
      ["start", "--wait", "--timeout=120", `--pgdata=${paths.data}`, `--log=${paths.log}`, `--options=-p ${port}`],
      user
    )
    if (ran.code !== 0) {
      return yield* new EmbeddedError({
        reason: "start_failed",
        detail: `pg_ctl start exited ${ran.code}: ${ran.stderr.trim()}\n${yield* logTail(paths)}`
      })
    }
  })

/** Stops the server (fast: sessions are ended, transactions rolled back) and waits until it is gone. */
export const stop = (binaries: Binaries, paths: Paths, user: OsUser): Effect.Effect<void, EmbeddedError> =>
  Effect.gen(function* () {
    const ran = yield* run(
      binaries.pg_ctl,
      ["stop", "--wait", "--timeout=120", "--mode=fast", `--pgdata=${paths.data}`],
      user
    )
    if (ran.code !== 0 && Option.isSome(yield* running(paths))) {
      return yield* new EmbeddedError({
        reason: "stop_failed",
        detail: `pg_ctl stop exited ${ran.code}: ${ran.stderr.trim()}\n${yield* logTail(paths)}`
      })
    }
  })

/** The server's version, as `postgres --version` says it (`18.4`). */
export const version = (binaries: Binaries): Effect.Effect<string> =>
  Effect.map(run(binaries.postgres, ["--version"]), (ran) => /(\d+(\.\d+)*)/.exec(ran.stdout)?.[1] ?? "unknown")
