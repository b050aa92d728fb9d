import { type ChildProcess, spawn } from "node:child_process"
import { mkdtemp, rm, symlink, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it, layer } from "@effect/vitest"
import { Cause, ConfigProvider, Effect, Exit, Option } from "effect"
import * as Cli from "../src/Cli/Cli.ts"
import { filterSensitive, table } from "../src/Cli/Format.ts"
import { DEAD_LETTER_HEADER, DLQ_RETRIES_HEADER, type Failure } from "../src/Queue/Message.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Processes } from "../src/Supervisor/Processes.ts"
import { VERSION } from "../src/version.ts"
import { pgbus, TestDb, testLayer } from "./support/cli.ts"
import { eventually } from "./support/jobs.ts"
import { urlFor } from "./support/server.ts"
import { emptyDatabase } from "./support/TestDatabase.ts"

let n = 0
const unique = (base: string) => `${base}_${n++}`

const failure: Failure = { errorClass: "SmtpError", message: "connection refused", attempt: 1 }

/** Sends a message to `queue` (created if needed), claims it and dead-letters it; returns its DLQ id. */
const deadLetter = (queue: string, payload: unknown, headers: Record<string, unknown> = {}) =>
  Effect.gen(function* () {
    const store = yield* QueueStore
    yield* store.create(queue)
    yield* store.send(queue, payload, { headers })
    const [claimed] = yield* store.read(queue)
    const moved = yield* store.moveToDeadLetter(queue, claimed!, { source: "worker", failure })
    return yield* Effect.fromOption(moved)
  })

/** The table row of the first column `key`, split into cells. */
const rowOf = (output: string, key: string): ReadonlyArray<string> | undefined =>
  output
    .split("\n")
    .map((line) => line.trim().split(/\s{2,}/))
    .find((cells) => cells[0] === key)

/** Dead letters in every DLQ of the test database. */
const deadLetterCount = Effect.gen(function* () {
  const store = yield* QueueStore
  const queues = yield* store.list
  let total = 0
  for (const q of queues) if (q.deadLetterOf !== undefined) total += (yield* store.metrics(q.name)).depth
  return total
})

describe("formatting and exit codes", () => {
  it.effect("filterSensitive replaces sensitive keys at any depth, case-insensitively", () =>
    Effect.sync(() => {
      const filtered = filterSensitive({
        user: "ada",
        Password: "hunter2",
        nested: { API_KEY: "k", access_token: "t", list: [{ clientSecret: "s", ok: 1 }] },
        Authorization: "Bearer x"
      })
      assert.deepStrictEqual(filtered, {
        user: "ada",
        Password: "[FILTERED]",
        nested: { API_KEY: "[FILTERED]", access_token: "[FILTERED]", list: [{ clientSecret: "[FILTERED]", ok: 1 }] },
        Authorization: "[FILTERED]"
      })
    })
  )

  it.effect("table aligns columns", () =>
    Effect.sync(() => {
      assert.strictEqual(
        table(
          ["A", "BB"],
          [
            ["xxx", "1"],
            ["y", "22"]
          ]
        ),
        "A    BB\nxxx  1\ny    22"
      )
    })
  )

  it.effect("exit codes: completion, drained supervisor, other interruptions", () =>
    Effect.sync(() => {
      assert.strictEqual(Cli.exitCodeOf(Exit.succeed(0), { supervising: false }), 0)
      assert.strictEqual(Cli.exitCodeOf(Exit.succeed(1), { supervising: false }), 1)
      assert.strictEqual(Cli.exitCodeOf(Exit.failCause(Cause.interrupt()), { supervising: true }), 0)
      assert.strictEqual(Cli.exitCodeOf(Exit.failCause(Cause.interrupt()), { supervising: false }), 130)
      assert.strictEqual(Cli.exitCodeOf(Exit.die(new Error("boom")), { supervising: true }), 1)
    })
  )
})

layer(testLayer, { excludeTestServices: true, timeout: "30 seconds" })("pgbus cli", (it) => {
  it.effect("version prints the version", () =>
    Effect.gen(function* () {
      const out = yield* Cli.capture(["version"])
      assert.strictEqual(out.exitCode, 0)
      assert.strictEqual(out.stdout, `effect-pgbus ${VERSION}`)
      assert.strictEqual(out.stderr, "")
    })
  )

  it.effect("an unknown subcommand exits 1", () =>
    Effect.gen(function* () {
      const top = yield* pgbus("frobnicate")
      assert.strictEqual(top.exitCode, 1)
      assert.include(top.stderr, 'Unknown subcommand "frobnicate"')
      const dlq = yield* pgbus("dlq", "frobnicate")
      assert.strictEqual(dlq.exitCode, 1)
    })
  )

  it.effect("a ConfigurationError prints its message, no stack trace, and exits 1", () =>
    Effect.gen(function* () {
      const out = yield* Cli.capture(["queues", "--database-url", "mysql://nope"])
      assert.strictEqual(out.exitCode, 1)
      assert.strictEqual(out.stderr, "pgbus: invalid configuration databaseUrl=<redacted>: must be a postgres:// URL")
      assert.notInclude(out.stderr, "    at ")
    })
  )

  it.effect("queues shows depth, visible and dead letters, without DLQ rows of their own", () =>
    Effect.gen(function* () {
      const store = yield* QueueStore
      const q = unique("cli_depth")
      yield* deadLetter(q, { n: 0 })
      yield* store.send(q, { n: 1 })
      yield* store.send(q, { n: 2 })
      yield* store.send(q, { n: 3 }, { delay: "1 hour" })
      const out = yield* pgbus("queues")
      assert.strictEqual(out.exitCode, 0, out.stderr)
      assert.deepStrictEqual(out.stdout.split("\n")[0]?.split(/\s+/), [
        "QUEUE",
        "DEPTH",
        "VISIBLE",
        "OLDEST",
        "LATENCY",
        "DEAD",
        "ARCHIVED",
        "PAUSED"
      ])
      const row = rowOf(out.stdout, q)
      assert.isDefined(row, out.stdout)
      assert.strictEqual(row?.[1], "3", "depth")
      assert.strictEqual(row?.[2], "2", "visible")
      assert.match(row?.[3] ?? "", /^\d+s$/, "oldest age")
      assert.match(row?.[4] ?? "", /^\d+s$/, "claimable latency")
      assert.strictEqual(row?.[5], "1", "dead letters")
      assert.strictEqual(row?.[6], "0", "archived")
      assert.strictEqual(row?.[7], "-", "not paused")
      assert.isUndefined(rowOf(out.stdout, `${q}_dlq`))
    })
  )

  it.effect("dlq list shows id, queues, reason and the total, never the payload", () =>
    Effect.gen(function* () {
      const q = unique("cli_list")
      const id = yield* deadLetter(q, { marker: "PAYLOAD-MUST-NOT-PRINT" })
      const out = yield* pgbus("dlq", "list", "--per-page", "1000")
      assert.strictEqual(out.exitCode, 0, out.stderr)
      const row = rowOf(out.stdout, `${q}_dlq:${id}`)
      assert.deepStrictEqual(row?.slice(1, 4), [`${q}_dlq`, q, "1"])
      assert.strictEqual(row?.[5], "SmtpError")
      assert.notInclude(out.stdout, "PAYLOAD-MUST-NOT-PRINT")
      const total = yield* deadLetterCount
      assert.include(out.stdout, `${total} dead letter(s)`)
    })
  )

  it.effect("dlq list pages", () =>
    Effect.gen(function* () {
      const total = yield* deadLetterCount
      assert.isAtLeast(total, 2)
      const first = yield* pgbus("dlq", "list", "--per-page", "1")
      const second = yield* pgbus("dlq", "list", "--per-page", "1", "--page", "2")
      const idOf = (s: string) => s.split("\n")[1]?.split(/\s+/)[0]
      assert.notStrictEqual(idOf(first.stdout), idOf(second.stdout))
      assert.include(second.stdout, `page 2 of ${total}`)
      const bad = yield* pgbus("dlq", "list", "--page", "0")
      assert.strictEqual(bad.exitCode, 1)
    })
  )

  it.effect("dlq show prints metadata, the block, headers and the payload with sensitive keys filtered", () =>
    Effect.gen(function* () {
      const q = unique("cli_show")
      const id = yield* deadLetter(
        q,
        { user: "ada", password: "hunter2", nested: { api_key: "k-123" } },
        { authorization: "Bearer abc", trace: "t-1" }
      )
      const out = yield* pgbus("dlq", "show", `${q}_dlq:${id}`)
      assert.strictEqual(out.exitCode, 0, out.stderr)
      assert.include(out.stdout, `id           ${q}_dlq:${id}`)
      assert.include(out.stdout, `origin       ${q}`)
      assert.match(out.stdout, /error_class\s+SmtpError/)
      assert.match(out.stdout, /source\s+worker/)
      assert.include(out.stdout, '"user": "ada"')
      assert.include(out.stdout, '"password": "[FILTERED]"')
      assert.include(out.stdout, '"api_key": "[FILTERED]"')
      assert.include(out.stdout, '"authorization": "[FILTERED]"')
      assert.include(out.stdout, '"trace": "t-1"')
      assert.notInclude(out.stdout, "hunter2")
      assert.notInclude(out.stdout, "k-123")
      assert.notInclude(out.stdout, "Bearer abc")
    })
  )

  it.effect("dlq retry puts the message back on its origin queue without the block", () =>
    Effect.gen(function* () {
      const store = yield* QueueStore
      const q = unique("cli_retry")
      const id = yield* deadLetter(q, { mail: 7 }, { keep: "me" })
      const out = yield* pgbus("dlq", "retry", `${q}_dlq:${id}`)
      assert.strictEqual(out.exitCode, 0, out.stderr)
      assert.include(out.stdout, `retried ${q}_dlq:${id} to ${q}`)
      assert.isTrue(Option.isNone(yield* store.get(`${q}_dlq`, id)), "gone from the DLQ")
      const [live] = yield* store.read(q)
      assert.deepStrictEqual(live?.message, { mail: 7 })
      assert.isUndefined(live?.headers[DEAD_LETTER_HEADER])
      assert.strictEqual(live?.headers[DLQ_RETRIES_HEADER], 1)
      assert.strictEqual(live?.headers.keep, "me")
    })
  )

  it.effect("an unknown or malformed dead-letter id exits 1 and changes nothing", () =>
    Effect.gen(function* () {
      const q = unique("cli_unknown")
      const id = yield* deadLetter(q, { n: 1 })
      const before = yield* deadLetterCount
      for (const args of [
        ["dlq", "retry", `${q}_dlq:${id + 1000n}`],
        ["dlq", "show", `${q}_dlq:${id + 1000n}`],
        ["dlq", "purge", `${q}_dlq:${id + 1000n}`],
        ["dlq", "retry", "nope_dlq:1"],
        ["dlq", "retry", `${q}:${id}`],
        ["dlq", "retry", "99999999"],
        ["dlq", "show", "not-an-id!"]
      ]) {
        const out = yield* pgbus(...args)
        assert.strictEqual(out.exitCode, 1, args.join(" "))
        assert.match(out.stderr, /^pgbus: /, args.join(" "))
      }
      const hinted = yield* pgbus("dlq", "show", `${q}:${id}`)
      assert.include(hinted.stderr, `did you mean ${q}_dlq:${id}?`)
      assert.strictEqual(yield* deadLetterCount, before)
    })
  )

  it.effect("dlq purge ID discards one dead letter", () =>
    Effect.gen(function* () {
      const store = yield* QueueStore
      const q = unique("cli_purge_one")
      const id = yield* deadLetter(q, { n: 1 })
      const out = yield* pgbus("dlq", "purge", `${q}_dlq:${id}`)
      assert.strictEqual(out.exitCode, 0, out.stderr)
      assert.isTrue(Option.isNone(yield* store.get(`${q}_dlq`, id)))
      assert.strictEqual((yield* pgbus("dlq", "purge", `${q}_dlq:${id}`)).exitCode, 1, "already gone")
    })
  )

  it.effect("start rejects conflicting roles, an unknown capsule and a missing app module", () =>
    Effect.gen(function* () {
      const roles = yield* pgbus("start", "--workers-only", "--dispatcher-only")
      assert.strictEqual(roles.exitCode, 1)
      assert.include(roles.stderr, "mutually exclusive")
      const capsule = yield* pgbus("start", "--capsule", "nope")
      assert.strictEqual(capsule.exitCode, 1)
      assert.include(capsule.stderr, "no capsule named nope")
      const app = yield* pgbus("start", "--app", "./does/not/exist.ts")
      assert.strictEqual(app.exitCode, 1)
      assert.include(app.stderr, "cannot load app module ./does/not/exist.ts")
      const fromEnv = yield* pgbus("start").pipe(
        Effect.provideService(
          ConfigProvider.ConfigProvider,
          ConfigProvider.fromEnv({ env: { PGBUS_APP: "./from/env.ts" } })
        )
      )
      assert.strictEqual(fromEnv.exitCode, 1)
      assert.include(fromEnv.stderr, "cannot load app module ./from/env.ts")
      const notRegistry = yield* pgbus("start", "--app", "./src/version.ts")
      assert.strictEqual(notRegistry.exitCode, 1)
      assert.include(notRegistry.stderr, "must be a Registry layer")
    })
  )
})

layer(testLayer, { excludeTestServices: true, timeout: "30 seconds" })("pgbus cli: ids and bulk", (it) => {
  it.effect("a bare msg id works when one DLQ holds it, and is ambiguous when several do", () =>
    Effect.gen(function* () {
      const store = yield* QueueStore
      const a = yield* deadLetter("ids_a", { n: 1 })
      const a2 = yield* deadLetter("ids_a", { n: 2 })
      const b = yield* deadLetter("ids_b", { n: 3 })
      assert.strictEqual(a, b, "ids are per queue: both DLQs start at the same id")
      const ambiguous = yield* pgbus("dlq", "show", String(a))
      assert.strictEqual(ambiguous.exitCode, 1)
      assert.include(ambiguous.stderr, `ids_a_dlq:${a}`)
      assert.include(ambiguous.stderr, `ids_b_dlq:${b}`)
      const bare = yield* pgbus("dlq", "retry", String(a2))
      assert.strictEqual(bare.exitCode, 0, bare.stderr)
      assert.isTrue(Option.isNone(yield* store.get("ids_a_dlq", a2)))
      assert.strictEqual((yield* store.metrics("ids_a")).depth, 1)
    })
  )

  it.effect("dlq retry-all re-enqueues every dead letter and prints the count", () =>
    Effect.gen(function* () {
      const store = yield* QueueStore
      yield* deadLetter("bulk_a", { n: 1 })
      yield* deadLetter("bulk_b", { n: 2 })
      const total = yield* deadLetterCount
      const out = yield* pgbus("dlq", "retry-all")
      assert.strictEqual(out.exitCode, 0, out.stderr)
      assert.include(out.stdout, `retried ${total} dead letter(s)`)
      assert.strictEqual(yield* deadLetterCount, 0)
      assert.strictEqual((yield* store.metrics("bulk_a")).depth, 1)
      assert.strictEqual((yield* store.metrics("bulk_b")).depth, 1)
    })
  )

  it.effect("dlq purge --all without --yes exits 1 and purges nothing; with --yes it purges", () =>
    Effect.gen(function* () {
      yield* deadLetter("purge_a", { n: 1 })
      yield* deadLetter("purge_b", { n: 2 })
      const before = yield* deadLetterCount
      assert.isAtLeast(before, 2)
      const refused = yield* pgbus("dlq", "purge", "--all")
      assert.strictEqual(refused.exitCode, 1)
      assert.include(refused.stderr, "without --yes")
      assert.strictEqual(yield* deadLetterCount, before, "nothing purged")
      const done = yield* pgbus("dlq", "purge", "--all", "--yes")
      assert.strictEqual(done.exitCode, 0, done.stderr)
      assert.include(done.stdout, `purged ${before} dead letter(s)`)
      assert.strictEqual(yield* deadLetterCount, 0)
      const empty = yield* pgbus("dlq", "list")
      assert.strictEqual(empty.stdout, "no dead letters")
    })
  )
})

layer(NodeServices.layer, { excludeTestServices: true })("pgbus migrate", (it) => {
  it.effect("applies the migrations to an empty database, then reports it up to date", () =>
    Effect.gen(function* () {
      const url = urlFor(yield* emptyDatabase)
      const first = yield* Cli.capture(["migrate", "--database-url", url])
      assert.strictEqual(first.exitCode, 0, first.stderr)
      assert.include(first.stdout, "applied migration 0001_queues to schema pgbus")
      const afterMigrate = yield* Cli.capture(["queues", "--database-url", url])
      assert.strictEqual(afterMigrate.exitCode, 0, afterMigrate.stderr)
      const second = yield* Cli.capture(["migrate", "--database-url", url])
      assert.strictEqual(second.exitCode, 0)
      assert.strictEqual(second.stdout, "schema pgbus is up to date")
    }).pipe(Effect.scoped)
  )

  it.effect("a command on an unmigrated database says to migrate", () =>
    Effect.gen(function* () {
      const url = urlFor(yield* emptyDatabase)
      const out = yield* Cli.capture(["queues", "--database-url", url])
      assert.strictEqual(out.exitCode, 1)
      assert.include(out.stderr, "run `pgbus migrate`")
    }).pipe(Effect.scoped)
  )
})

// ---------------------------------------------------------------------------------------------
// `pgbus start` as a real process (the CLI's sources under tsx: the compiled `bin/pgbus.mjs` is
// run by test/package.test.ts): loads --app, runs jobs, drains on SIGTERM, exits 0

const repoRoot = fileURLToPath(new URL("..", import.meta.url))

/** A temporary app module exporting `registry`; its node_modules links to the repo's. */
const appModule = Effect.acquireRelease(
  Effect.promise(async () => {
    const dir = await mkdtemp(join(tmpdir(), "pgbus-cli-app-"))
    await symlink(join(repoRoot, "node_modules"), join(dir, "node_modules"), "dir")
    await writeFile(join(dir, "package.json"), JSON.stringify({ type: "module" }))
    const src = (file: string) => pathToFileURL(join(repoRoot, "src", file)).href
    await writeFile(
      join(dir, "app.ts"),
      [
        `import { Effect, Schema } from "effect"`,
        `import * as Job from ${JSON.stringify(src("Job/Job.ts"))}`,
        `import { Registry } from ${JSON.stringify(src("Registry.ts"))}`,
        `const CliEcho = Job.make("CliEcho", { payload: Schema.Struct({ n: Schema.Number }), queue: "cli_jobs" }, ({ n }) => Effect.log("echo", n))`,
        `export const registry = Registry.layer([CliEcho])`,
        ""
      ].join("\n")
    )
    return dir
  }),
  (dir) => Effect.promise(() => rm(dir, { recursive: true, force: true }))
)

/** Spawns `node --import tsx src/bin/pgbus.ts <args>`; kills it (by its handle) if the scope closes first. */
const spawnCli = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const child: ChildProcess = spawn(
        process.execPath,
        ["--import", "tsx", join(repoRoot, "src/bin/pgbus.ts"), ...args],
        {
          cwd: repoRoot,
          env: { ...process.env, ...env },
          stdio: ["ignore", "pipe", "pipe"]
        }
      )
      const output = { text: "" }
      child.stdout?.on("data", (chunk: Buffer) => {
        output.text += chunk.toString()
      })
      child.stderr?.on("data", (chunk: Buffer) => {
        output.text += chunk.toString()
      })
      const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
      return { child, output, exited }
    }),
    ({ child }) => Effect.sync(() => child.exitCode === null && child.kill("SIGKILL"))
  )

layer(testLayer, { excludeTestServices: true, timeout: "30 seconds" })("pgbus start (process)", (it) => {
  it.effect(
    "start --app runs the app's jobs; SIGTERM drains, unregisters and exits 0",
    () =>
      Effect.gen(function* () {
        const { url } = yield* TestDb
        const store = yield* QueueStore
        const processes = yield* Processes
        const dir = yield* appModule
        const { child, output, exited } = yield* spawnCli(
          ["start", "--app", join(dir, "app.ts"), "--database-url", url],
          { PGBUS_WORKERS: "cli_jobs: 2" }
        )
        yield* eventually(
          "the supervisor is ready",
          Effect.sync(() => output.text.includes("[pgbus] ready")),
          "30 seconds"
        ).pipe(Effect.catchDefect((defect) => Effect.die(new Error(`${String(defect)}\n${output.text}`))))
        assert.include(output.text, "jobs=CliEcho")
        const rows = yield* processes.list
        assert.isTrue(
          rows.some((p) => p.pid === child.pid),
          "registered"
        )
        const id = yield* store.send("cli_jobs", { job: "CliEcho", payload: { n: 1 } })
        yield* eventually("the job ran and was archived", store.isArchived("cli_jobs", id), "20 seconds")

        child.kill("SIGTERM")
        const code = yield* Effect.promise(() => exited)
        assert.strictEqual(code, 0, output.text)
        assert.include(output.text, "[pgbus] draining")
        assert.isFalse(
          (yield* processes.list).some((p) => p.pid === child.pid),
          "unregistered"
        )
      }).pipe(Effect.scoped),
    60_000
  )
})
