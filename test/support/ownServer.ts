/**
 * A PostgreSQL server of the test's own, for tests where the database must go away: initdb in a
 * temporary directory, started on a port found free now (never the shared server, never a fixed
 * port), stopped and removed when the scope closes. Runs as the `postgres` OS user when the tests
 * run as root (PostgreSQL refuses root).
 */
import { execFile } from "node:child_process"
import { chmod, chown, mkdtemp, readdir, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect } from "effect"
import { freePortPromise } from "./ports.ts"

const binDir = async (): Promise<string> => {
  const versions = (await readdir("/usr/lib/postgresql")).sort((a, b) => Number(b) - Number(a))
  return `/usr/lib/postgresql/${versions[0]}/bin`
}

const run = (command: string, args: ReadonlyArray<string>) =>
  new Promise<string>((resolve, reject) => {
    const asRoot = process.getuid?.() === 0
    const [file, argv] = asRoot ? ["runuser", ["-u", "postgres", "--", command, ...args]] : [command, [...args]]
    execFile(file, argv, { timeout: 60_000 }, (error, stdout, stderr) =>
      error ? reject(new Error(`${command} failed: ${error.message}\n${stderr}`)) : resolve(stdout)
    )
  })

/** A running server of the test's own. */
export interface OwnServer {
  /** URL of its `postgres` database (trust auth, user postgres). */
  readonly url: string
  /** Stops it (fast shutdown): connections fail from then on. */
  readonly stop: Effect.Effect<void>
  /** Starts it again on the same port. */
  readonly start: Effect.Effect<void>
}

/** Starts a server of the test's own; stopped and its directory removed when the scope closes. */
export const ownServer = Effect.acquireRelease(
  Effect.promise(async () => {
    const bin = await binDir()
    const dir = await mkdtemp(join(tmpdir(), "pgbus-own-"))
    await chmod(dir, 0o755)
    if (process.getuid?.() === 0) {
      const { uid, gid } = await new Promise<{ uid: number; gid: number }>((resolve, reject) =>
        execFile("id", ["-u", "postgres"], (e1, u) =>
          e1
            ? reject(e1)
            : execFile("id", ["-g", "postgres"], (e2, g) =>
                e2 ? reject(e2) : resolve({ uid: Number(u), gid: Number(g) })
              )
        )
      )
      await chown(dir, uid, gid)
    }
    const data = join(dir, "data")
    await run(`${bin}/initdb`, ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
    const port = await freePortPromise()
    const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50`
    const start = () => run(`${bin}/pg_ctl`, ["-D", data, "-o", options, "-l", join(dir, "log"), "-w", "start"])
    const stop = () => run(`${bin}/pg_ctl`, ["-D", data, "-m", "fast", "-w", "stop"]).catch(() => "")
    await start()
    return {
      dir,
      url: `postgres://postgres@127.0.0.1:${port}/postgres`,
      stop: Effect.promise(stop).pipe(Effect.asVoid),
      start: Effect.promise(start).pipe(Effect.asVoid),
      stopNow: stop
    }
  }),
  (server) => Effect.promise(() => server.stopNow().then(() => rm(server.dir, { recursive: true, force: true })))
).pipe(Effect.map((s): OwnServer => ({ url: s.url, stop: s.stop, start: s.start })))
