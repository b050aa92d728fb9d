/**
 * A PostgreSQL cluster of the test's own (the embedded binaries, a temporary data folder, a port
 * free at run time), for tests that need a server set up differently or that stop it; removed
 * when the scope closes. Never the shared server.
 */
import { appendFile, chmod, chown, mkdtemp, rm, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect, type Scope } from "effect"
import { locate } from "../../src/Embedded/Binaries.ts"
import * as Cluster from "../../src/Embedded/Cluster.ts"
import { freePort, type OsUser, osUser } from "../../src/Embedded/Host.ts"

export interface PrivateCluster {
  readonly port: number
  readonly password: string
  readonly dataDir: string
  /** The server user (root runs the server as `postgres`). */
  readonly user: OsUser
  /** A URL of a database on it (the superuser, the password), with extra query parameters. */
  readonly url: (options?: { readonly database?: string; readonly host?: string; readonly query?: string }) => string
}

export interface ClusterOptions {
  /** Lines appended to postgresql.conf. */
  readonly settings?: ReadonlyArray<string>
  /** pg_hba.conf's lines (replacing initdb's). */
  readonly hba?: ReadonlyArray<string>
  /** Files written into the data folder (owned by the server user, mode 0600). */
  readonly files?: Readonly<Record<string, string>>
}

/** Initialises and starts a cluster of the test's own; stops and removes it when the scope closes. */
export const privateCluster = (options: ClusterOptions = {}): Effect.Effect<PrivateCluster, never, Scope.Scope> =>
  Effect.gen(function* () {
    const binaries = yield* locate
    const user = yield* osUser("postgres")
    const root = yield* Effect.acquireRelease(
      Effect.promise(async () => {
        const dir = await mkdtemp(join(tmpdir(), "pgbus-cluster-"))
        // the server's user must be able to enter it
        await chmod(dir, 0o755)
        return dir
      }),
      (dir) => Effect.promise(() => rm(dir, { recursive: true, force: true }))
    )
    const paths = yield* Cluster.prepare(join(root, "data"), user)
    yield* Cluster.initialise(binaries, paths, user, { durable: false })
    yield* Effect.promise(async () => {
      if (options.settings) await appendFile(join(paths.data, "postgresql.conf"), `\n${options.settings.join("\n")}\n`)
      if (options.hba) await writeFile(join(paths.data, "pg_hba.conf"), `${options.hba.join("\n")}\n`)
      for (const [name, text] of Object.entries(options.files ?? {})) {
        const path = join(paths.data, name)
        await writeFile(path, text, { mode: 0o600 })
        if (user.uid !== undefined) await chown(path, user.uid, user.gid!)
      }
    })
    const port = yield* freePort
    yield* Effect.acquireRelease(Cluster.start(binaries, paths, user, port), () =>
      Cluster.stop(binaries, paths, user).pipe(Effect.ignore)
    )
    const password = yield* Cluster.password(paths)
    return {
      port,
      password,
      dataDir: paths.data,
      user,
      url: ({ database = "postgres", host = "127.0.0.1", query }: Parameters<PrivateCluster["url"]>[0] = {}) =>
        `postgres://${Cluster.SUPERUSER}:${encodeURIComponent(password)}@${host}:${port}/${database}${query ? `?${query}` : ""}`
    }
  }).pipe(Effect.orDie)
