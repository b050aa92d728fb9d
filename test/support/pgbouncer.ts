/**
 * A pgbouncer of the test's own (Debian's `pgbouncer`) in transaction mode in front of the test
 * server: its own config in a temporary directory, a port found free now, killed and removed
 * when the scope closes. Runs as the `postgres` OS user when the tests run as root (pgbouncer
 * refuses root).
 */
import { execFile } from "node:child_process"
import { constants } from "node:fs"
import { access, chmod, chown, mkdtemp, readFile, rm, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect } from "effect"
import { targetOf } from "../../src/Connection.ts"
import { freePortPromise } from "./ports.ts"
import { serverUrl } from "./server.ts"

const PGBOUNCER = "/usr/sbin/pgbouncer"

const run = (command: string, args: ReadonlyArray<string>) =>
  new Promise<string>((resolve, reject) => {
    const asRoot = process.getuid?.() === 0
    const [file, argv] = asRoot ? ["runuser", ["-u", "postgres", "--", command, ...args]] : [command, [...args]]
    execFile(file, argv, { timeout: 30_000 }, (error, stdout, stderr) =>
      error ? reject(new Error(`${command} failed: ${error.message}\n${stderr}`)) : resolve(stdout)
    )
  })

const ownerOfPostgres = () =>
  new Promise<{ uid: number; gid: number }>((resolve, reject) =>
    execFile("id", ["-u", "postgres"], (e1, u) =>
      e1
        ? reject(e1)
        : execFile("id", ["-g", "postgres"], (e2, g) => (e2 ? reject(e2) : resolve({ uid: Number(u), gid: Number(g) })))
    )
  )

/** A running pgbouncer. */
export interface Bouncer {
  /** Its port on 127.0.0.1; a URL's database name is passed through to the server. */
  readonly port: number
  /** The URL of `database` through it. */
  readonly urlFor: (database: string) => string
  /** Its log (connections are logged). */
  readonly log: Effect.Effect<string>
}

/** Installs Debian's pgbouncer when it is missing (as `.ci/run` does; needs root). */
const ensureInstalled = async () => {
  if (
    await access(PGBOUNCER, constants.X_OK).then(
      () => true,
      () => false
    )
  )
    return
  await new Promise<void>((resolve, reject) =>
    execFile(
      "sh",
      ["-c", "apt-get update -qq && apt-get install -y -qq --no-install-recommends pgbouncer"],
      { timeout: 300_000 },
      (error, _stdout, stderr) =>
        error ? reject(new Error(`pgbouncer is missing and could not be installed: ${stderr}`)) : resolve()
    )
  )
}

/** Starts pgbouncer in transaction mode; killed and its directory removed when the scope closes. */
export const pgbouncer = Effect.acquireRelease(
  Effect.promise(async () => {
    await ensureInstalled()
    const dir = await mkdtemp(join(tmpdir(), "pgbus-bouncer-"))
    await chmod(dir, 0o755)
    if (process.getuid?.() === 0) {
      const { uid, gid } = await ownerOfPostgres()
      await chown(dir, uid, gid)
    }
    const server = targetOf(serverUrl())
    const port = await freePortPromise()
    const ini = join(dir, "pgbouncer.ini")
    const pidfile = join(dir, "pgbouncer.pid")
    await writeFile(join(dir, "userlist.txt"), `"${server.username}" ""\n`)
    await writeFile(
      ini,
      [
        "[databases]",
        // the embedded server has a password: pgbouncer logs in with it (clients need none)
        `* = host=${server.host} port=${server.port}${server.password === undefined ? "" : ` user=${server.username} password=${server.password}`}`,
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        `listen_port = ${port}`,
        "unix_socket_dir =",
        "auth_type = trust",
        `auth_file = ${join(dir, "userlist.txt")}`,
        "pool_mode = transaction",
        "max_client_conn = 500",
        "default_pool_size = 3",
        "log_connections = 1",
        `logfile = ${join(dir, "pgbouncer.log")}`,
        `pidfile = ${pidfile}`,
        ""
      ].join("\n")
    )
    if (process.getuid?.() === 0) {
      const { uid, gid } = await ownerOfPostgres()
      for (const f of ["pgbouncer.ini", "userlist.txt"]) await chown(join(dir, f), uid, gid)
    }
    await run(PGBOUNCER, ["-d", ini])
    // the daemon writes its pid file after it forked
    let pid = Number.NaN
    for (let i = 0; i < 100 && !(pid > 0); i++) {
      pid = Number((await readFile(pidfile, "utf8").catch(() => "")).trim())
      if (!(pid > 0)) await new Promise((r) => setTimeout(r, 50))
    }
    if (!(pid > 0))
      throw new Error(`pgbouncer did not start: ${await readFile(join(dir, "pgbouncer.log"), "utf8").catch(() => "")}`)
    return { dir, port, pid }
  }),
  ({ dir, pid }) =>
    Effect.promise(async () => {
      try {
        process.kill(pid, "SIGTERM")
      } catch {
        // already gone
      }
      await rm(dir, { recursive: true, force: true })
    })
).pipe(
  Effect.map(
    ({ dir, port }): Bouncer => ({
      port,
      urlFor: (database) => `postgres://${targetOf(serverUrl()).username}@127.0.0.1:${port}/${database}`,
      log: Effect.promise(() => readFile(join(dir, "pgbouncer.log"), "utf8").catch(() => ""))
    })
  )
)
