/**
 * What the embedded server needs from the host: running a program (as another OS user when
 * this process is root, since PostgreSQL refuses to run as root), that user, free ports and
 * whether a process is alive.
 */
import { execFile } from "node:child_process"
import * as Net from "node:net"
import { Effect } from "effect"
import { EmbeddedError } from "./EmbeddedError.ts"

/** The OS user the server runs as: `undefined` ids mean this process's own. */
export interface OsUser {
  readonly name: string
  readonly uid: number | undefined
  readonly gid: number | undefined
}

/** What a program printed, and its exit code (`null` when a signal ended it). */
export interface Ran {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** The environment for the server's programs: this process's, without libpq's `PG*` variables. */
const programEnvironment = (): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = {}
  for (const [name, value] of Object.entries(process.env)) if (!name.startsWith("PG")) env[name] = value
  return { ...env, LC_ALL: "C" }
}

/** Runs a program to its end as `user`; never fails: the caller reads the exit code. */
export const run = (file: string, args: ReadonlyArray<string>, user?: OsUser): Effect.Effect<Ran> =>
  Effect.callback<Ran>((resume) => {
    const child = execFile(
      file,
      [...args],
      {
        env: programEnvironment(),
        ...(user?.uid !== undefined ? { uid: user.uid } : {}),
        ...(user?.gid !== undefined ? { gid: user.gid } : {}),
        maxBuffer: 16 * 1024 * 1024
      },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : error.signal ? null : 1
        resume(Effect.succeed({ code, stdout: String(stdout), stderr: String(stderr || error?.message || "") }))
      }
    )
    return Effect.sync(() => child.kill())
  })

const isRoot = () => process.getuid?.() === 0

const idOf = (flag: "-u" | "-g", name: string) =>
  Effect.map(run("id", [flag, name]), (ran) => (ran.code === 0 ? Number(ran.stdout.trim()) : undefined))

/**
 * The user the server runs as: this process's own, or, as root, the OS user `name`, created
 * (a system user with its own group, no home, no shell) when it does not exist.
 */
export const osUser = (name: string): Effect.Effect<OsUser, EmbeddedError> =>
  Effect.gen(function* () {
    if (!isRoot()) return { name: "", uid: undefined, gid: undefined }
    let uid = yield* idOf("-u", name)
    if (uid === undefined) {
      const created = yield* run("useradd", [
        "--system",
        "--user-group",
        "--no-create-home",
        "--shell",
        "/usr/sbin/nologin",
        name
      ])
      if (created.code !== 0) {
        return yield* new EmbeddedError({
          reason: "os_user",
          detail: `PostgreSQL refuses to run as root and OS user ${name} does not exist; creating it failed: ${created.stderr.trim()}. Create it (useradd --system ${name}), pass another osUser, or run as another user`
        })
      }
      yield* Effect.logInfo(
        `[pgbus] created OS user ${name} to run the embedded PostgreSQL (it refuses to run as root)`
      )
      uid = yield* idOf("-u", name)
    }
    const gid = yield* idOf("-g", name)
    if (uid === undefined || gid === undefined) {
      return yield* new EmbeddedError({ reason: "os_user", detail: `cannot read the ids of OS user ${name}` })
    }
    return { name, uid, gid }
  })

/** Whether a process with this id is alive (on this host). */
export const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    // EPERM: it exists but belongs to someone else
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

/** A TCP port on 127.0.0.1 that is free now (the OS picks it). */
export const freePort: Effect.Effect<number> = Effect.callback<number>((resume) => {
  const server = Net.createServer()
  server.unref()
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    server.close(() => resume(Effect.succeed(port)))
  })
})

/** Whether something accepts TCP connections on 127.0.0.1:port. */
export const answers = (port: number): Effect.Effect<boolean> =>
  Effect.callback<boolean>((resume) => {
    const socket = Net.connect({ host: "127.0.0.1", port })
    const done = (ok: boolean) => {
      socket.destroy()
      resume(Effect.succeed(ok))
    }
    socket.once("connect", () => done(true))
    socket.once("error", () => done(false))
    return Effect.sync(() => socket.destroy())
  })
