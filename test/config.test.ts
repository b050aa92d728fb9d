import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect, Redacted } from "effect"
import { describeTarget, envName, PgBusConfig, resolve } from "../src/Config.ts"
import { type Target, targetOf, tlsOptions } from "../src/Connection.ts"
import { fakeServer } from "./support/fakeServer.ts"

const fromEnv = (env: Record<string, string>) =>
  Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env }))

describe("configuration", () => {
  it.effect("defaults follow the seeds' configuration reference", () =>
    Effect.gen(function* () {
      const c = yield* resolve()
      assert.strictEqual(c.schema, "pgbus")
      assert.strictEqual(c.queuePrefix, "pgbus")
      assert.strictEqual(c.defaultQueue, "default")
      assert.strictEqual(Duration.toSeconds(c.visibilityTimeout), 30)
      assert.strictEqual(c.maxRetries, 5)
      assert.strictEqual(Duration.toSeconds(c.retryBackoff), 5)
      assert.strictEqual(Duration.toSeconds(c.retryBackoffMax), 300)
      assert.strictEqual(c.retryBackoffJitter, 0.15)
      assert.strictEqual(Duration.toMillis(c.pollingInterval), 100)
      assert.isTrue(c.listenNotify)
      assert.isTrue(c.localDispatch)
      assert.strictEqual(Duration.toDays(c.archiveRetention!), 7)
      assert.strictEqual(c.maxPayloadSize, 131_072)
    })
  )

  it.effect("reads DATABASE_URL and PGBUS_* from the environment; bare numbers are seconds", () =>
    Effect.gen(function* () {
      const c = yield* PgBusConfig
      assert.strictEqual(Redacted.value(c.databaseUrl), "postgres://u:secret@db:5433/app")
      assert.strictEqual(Duration.toSeconds(c.visibilityTimeout), 45)
      assert.strictEqual(Duration.toMillis(c.pollingInterval), 250)
      assert.strictEqual(c.maxRetries, 2)
      assert.isFalse(c.listenNotify)
      assert.isUndefined(c.archiveRetention)
      assert.strictEqual(c.queuePrefix, "myapp")
      assert.notInclude(String(c.databaseUrl), "secret", "the URL stays redacted when printed")
    }).pipe(
      Effect.provide(PgBusConfig.layer()),
      fromEnv({
        DATABASE_URL: "postgres://u:secret@db:5433/app",
        PGBUS_VISIBILITY_TIMEOUT: "45",
        PGBUS_POLLING_INTERVAL: "250 millis",
        PGBUS_MAX_RETRIES: "2",
        PGBUS_LISTEN_NOTIFY: "false",
        PGBUS_ARCHIVE_RETENTION: "none",
        PGBUS_QUEUE_PREFIX: "myapp"
      })
    )
  )

  it.effect("code overrides win over the environment", () =>
    Effect.gen(function* () {
      const c = yield* PgBusConfig
      assert.strictEqual(c.maxRetries, 9)
      assert.strictEqual(Duration.toSeconds(c.visibilityTimeout), 10)
    }).pipe(
      Effect.provide(PgBusConfig.layer({ maxRetries: 9, visibilityTimeout: "10 seconds" })),
      fromEnv({ PGBUS_MAX_RETRIES: "2" })
    )
  )

  const invalid: ReadonlyArray<[string, Parameters<typeof resolve>[0], string]> = [
    ["visibility timeout 0", { visibilityTimeout: 0 }, "visibilityTimeout"],
    ["negative retries", { maxRetries: -1 }, "maxRetries"],
    ["zero deliveries", { maxRetries: 0 }, "maxRetries"],
    ["fractional retries", { maxRetries: 1.5 }, "maxRetries"],
    ["a queue prefix with a dash", { queuePrefix: "my-app" }, "queuePrefix"],
    ["a schema with a quote", { schema: 'x"; drop' }, "schema"],
    ["jitter above 1", { retryBackoffJitter: 1.5 }, "retryBackoffJitter"],
    ["a backoff cap below the base", { retryBackoff: "10 seconds", retryBackoffMax: "5 seconds" }, "retryBackoffMax"],
    ["a pool of 0", { poolSize: 0 }, "poolSize"],
    ["a non-postgres URL", { databaseUrl: "mysql://x" }, "databaseUrl"],
    ["a tiny payload cap", { maxPayloadSize: 10 }, "maxPayloadSize"],
    ["a batch sweep interval of 0", { batchSweepInterval: 0 }, "batchSweepInterval"],
    ["a negative batch stall threshold", { batchStallThreshold: "-5 minutes" }, "batchStallThreshold"],
    ["a batch retention of 0", { batchRetention: "0 millis" }, "batchRetention"],
    ["a negative drain timeout", { drainTimeout: -1 }, "drainTimeout"]
  ]
  for (const [what, overrides, key] of invalid) {
    it.effect(`${what} fails with a ConfigurationError naming ${key}`, () =>
      Effect.gen(function* () {
        const error = yield* Effect.flip(resolve(overrides))
        assert.strictEqual(error._tag, "ConfigurationError")
        assert.strictEqual(error.key, key)
        assert.isAbove(error.rule.length, 5)
        assert.include(error.message, key)
      })
    )
  }

  it.effect("batch keys: the seeds' defaults (5 minutes, 5 minutes, 7 days), seconds from the environment, none", () =>
    Effect.gen(function* () {
      const d = yield* resolve()
      assert.strictEqual(Duration.toMinutes(d.batchSweepInterval), 5)
      assert.strictEqual(Duration.toMinutes(d.batchStallThreshold), 5)
      assert.strictEqual(Duration.toDays(d.batchRetention!), 7)
      const c = yield* PgBusConfig
      assert.strictEqual(Duration.toSeconds(c.batchSweepInterval), 60)
      assert.strictEqual(Duration.toMillis(c.batchStallThreshold), 1_500)
      assert.isUndefined(c.batchRetention)
    }).pipe(
      Effect.provide(PgBusConfig.layer()),
      fromEnv({
        PGBUS_BATCH_SWEEP_INTERVAL: "60",
        PGBUS_BATCH_STALL_THRESHOLD: "1500 millis",
        PGBUS_BATCH_RETENTION: "none"
      })
    )
  )

  it.effect("fair-share resolvers: unset by default, set in code only, and must be functions", () =>
    Effect.gen(function* () {
      const d = yield* resolve()
      assert.isUndefined(d.fairShare)
      assert.isUndefined(d.eventFairShare)
      const jobs = (job: { readonly payload: unknown }) => String((job.payload as { tenant: string }).tenant)
      const events = () => ["acme", 2] as const
      const c = yield* resolve({ fairShare: jobs, eventFairShare: events })
      assert.strictEqual(c.fairShare, jobs)
      assert.strictEqual(c.eventFairShare, events)
      assert.isUndefined((yield* resolve({ fairShare: null })).fairShare)
      for (const key of ["fairShare", "eventFairShare"] as const) {
        const error = yield* Effect.flip(resolve({ [key]: "tenant_id" as never }))
        assert.strictEqual(error.key, key)
        assert.include(error.rule, "function")
      }
      // no environment variable names them
      const fromEnvironment = yield* PgBusConfig
      assert.isUndefined(fromEnvironment.fairShare)
    }).pipe(
      Effect.provide(PgBusConfig.layer()),
      fromEnv({ PGBUS_FAIR_SHARE: "tenant_id", PGBUS_EVENT_FAIR_SHARE: "tenant_id" })
    )
  )

  it("environment variables are PGBUS_ and the key in snake case; code-only keys have none", () => {
    assert.strictEqual(envName("visibilityHeartbeatInterval"), "PGBUS_VISIBILITY_HEARTBEAT_INTERVAL")
    assert.strictEqual(envName("databaseUrl"), "DATABASE_URL")
    assert.isUndefined(envName("fairShare"))
  })

  it.effect("an invalid environment value fails the layer, naming the key and the rule", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(Effect.provide(PgBusConfig.use(Effect.succeed), PgBusConfig.layer()))
      assert.strictEqual(error.key, "visibilityTimeout")
      assert.include(error.message, "greater than zero")
    }).pipe(fromEnv({ PGBUS_VISIBILITY_TIMEOUT: "0" }))
  )
})

describe("the connection as libpq users expect", () => {
  const target = (c: { readonly databaseUrl: Redacted.Redacted<string> }) => targetOf(Redacted.value(c.databaseUrl))

  it.effect("without DATABASE_URL, PGHOST, PGPORT, PGUSER, PGPASSWORD and PGDATABASE name the server", () =>
    Effect.gen(function* () {
      const c = yield* PgBusConfig
      assert.deepStrictEqual(target(c), {
        host: "db.internal",
        port: 6543,
        database: "app",
        username: "app",
        password: "s3cret",
        sslmode: undefined,
        sslrootcert: undefined,
        sslcert: undefined,
        sslkey: undefined,
        connectTimeout: undefined
      })
      assert.strictEqual(c.databaseSource, "from PGHOST")
      assert.strictEqual(describeTarget(c), "db.internal:6543/app")
    }).pipe(
      Effect.provide(PgBusConfig.layer()),
      fromEnv({ PGHOST: "db.internal", PGPORT: "6543", PGUSER: "app", PGPASSWORD: "s3cret" })
    )
  )

  it.effect("a URL's own parts win; the parts it leaves out come from the environment", () =>
    Effect.gen(function* () {
      const c = yield* PgBusConfig
      const t = target(c)
      assert.strictEqual(t.host, "db")
      assert.strictEqual(t.port, 5432)
      assert.strictEqual(t.database, "orders")
      assert.strictEqual(t.username, "alice")
      assert.strictEqual(t.password, "from-env")
      assert.strictEqual(t.sslmode, "verify-full")
      assert.strictEqual(t.sslrootcert, "/etc/ca.pem")
      assert.strictEqual(c.databaseSource, "from DATABASE_URL")
      const own = targetOf(
        Redacted.value(
          (yield* resolve(
            { databaseUrl: "postgres://bob:own@db:5433/x?sslmode=disable" },
            { PGPASSWORD: "from-env", PGSSLMODE: "require", PGUSER: "alice" }
          )).databaseUrl
        )
      )
      assert.strictEqual(own.password, "own")
      assert.strictEqual(own.username, "bob")
      assert.strictEqual(own.port, 5433)
      assert.strictEqual(own.sslmode, "disable")
    }).pipe(
      Effect.provide(PgBusConfig.layer()),
      fromEnv({
        DATABASE_URL: "postgres://db/orders",
        PGUSER: "alice",
        PGPASSWORD: "from-env",
        PGHOST: "ignored",
        PGSSLMODE: "verify-full",
        PGSSLROOTCERT: "/etc/ca.pem"
      })
    )
  )

  it.effect("a socket directory in PGHOST, and nothing at all: the defaults", () =>
    Effect.gen(function* () {
      const socket = target(yield* resolve({}, { PGHOST: "/var/run/postgresql", PGUSER: "me" }))
      assert.strictEqual(socket.host, "/var/run/postgresql")
      assert.strictEqual(socket.database, "me")
      // a URL given in code names its host even when it reads like the default
      const explicit = yield* resolve({ databaseUrl: "postgres://postgres@127.0.0.1:5432/postgres" }, { PGHOST: "db" })
      assert.strictEqual(target(explicit).host, "127.0.0.1")
      const none = yield* resolve()
      assert.strictEqual(Redacted.value(none.databaseUrl), "postgres://postgres@127.0.0.1:5432/postgres")
      assert.include(none.databaseSource, "set DATABASE_URL or PGHOST")
    })
  )

  it.effect("connect_timeout from the URL or PGCONNECT_TIMEOUT, read as libpq reads it", () =>
    Effect.gen(function* () {
      const seconds = (t: Target) => (t.connectTimeout === undefined ? undefined : Duration.toSeconds(t.connectTimeout))
      // unset: DEFAULT_CONNECT_TIMEOUT (5 s) applies
      assert.isUndefined(target(yield* resolve()).connectTimeout)
      assert.strictEqual(seconds(target(yield* resolve({ databaseUrl: "postgres://db/x?connect_timeout=15" }))), 15)
      assert.strictEqual(seconds(target(yield* resolve({}, { PGCONNECT_TIMEOUT: "20", PGHOST: "db" }))), 20)
      // the URL's own wins over the environment's
      const own = yield* resolve({ databaseUrl: "postgres://db/x?connect_timeout=7" }, { PGCONNECT_TIMEOUT: "20" })
      assert.strictEqual(seconds(target(own)), 7)
      // libpq: 1 counts as 2, zero or less waits without a bound
      assert.strictEqual(seconds(target(yield* resolve({ databaseUrl: "postgres://db/x?connect_timeout=1" }))), 2)
      const unbounded = target(yield* resolve({ databaseUrl: "postgres://db/x?connect_timeout=0" })).connectTimeout
      assert.isTrue(unbounded !== undefined && !Duration.isFinite(unbounded))
      // not whole seconds: refused, naming the parameter, the URL not echoed
      const bad = yield* Effect.flip(resolve({ databaseUrl: "postgres://u:pw@db/x?connect_timeout=2.5s" }))
      assert.strictEqual(bad.key, "databaseUrl")
      assert.include(bad.rule, "connect_timeout")
      assert.notInclude(bad.message, "pw")
      const badEnv = yield* Effect.flip(resolve({}, { PGCONNECT_TIMEOUT: "soon" }))
      assert.include(badEnv.rule, "PGCONNECT_TIMEOUT")
    })
  )

  it.effect("ssl: an sslmode or a boolean from PGBUS_SSL, TLS options in code, anything else refused", () =>
    Effect.gen(function* () {
      assert.strictEqual((yield* PgBusConfig).ssl, "verify-ca")
      assert.strictEqual((yield* resolve({}, { PGBUS_SSL: "TRUE" })).ssl, true)
      assert.isUndefined((yield* resolve()).ssl)
      const options = { rejectUnauthorized: false }
      assert.strictEqual((yield* resolve({ ssl: options })).ssl, options)
      const bad = yield* Effect.flip(resolve({}, { PGBUS_SSL: "sometimes" }))
      assert.strictEqual(bad.key, "ssl")
      assert.include(bad.rule, "verify-full")
      const badUrl = yield* Effect.flip(resolve({ databaseUrl: "postgres://u:pw@db/x?sslmode=maybe" }))
      assert.strictEqual(badUrl.key, "databaseUrl")
      assert.include(badUrl.rule, "sslmode")
      assert.notInclude(badUrl.message, "pw", "the URL is not echoed")
      // a typo in PGSSLMODE is refused, not read as "no TLS"
      const badEnv = yield* Effect.flip(resolve({}, { PGSSLMODE: "requre", PGHOST: "db" }))
      assert.strictEqual(badEnv.key, "databaseUrl")
      assert.include(badEnv.rule, "PGSSLMODE")
    }).pipe(Effect.provide(PgBusConfig.layer()), fromEnv({ PGBUS_SSL: "verify-ca" }))
  )
})

describe("the driver's TLS options for each sslmode", () => {
  const t = (sslmode: string | undefined, extra = "") =>
    targetOf(`postgres://u@db.example:5432/x${sslmode ? `?sslmode=${sslmode}${extra}` : ""}`)

  it.live(
    "prefer waits for a slow server's answer to TLS as long as connect_timeout allows (not taken for a no)",
    () =>
      Effect.gen(function* () {
        // a server that answers yes to TLS after 6 s (a serverless one waking, say)
        const { port } = yield* fakeServer((socket) =>
          socket.once("data", () => {
            const timer = setTimeout(() => socket.write("S"), 6_000)
            socket.once("close", () => clearTimeout(timer))
          })
        )
        const url = `postgres://u@127.0.0.1:${port}/x?sslmode=prefer&connect_timeout=10`
        assert.deepStrictEqual(yield* tlsOptions(targetOf(url), undefined), { rejectUnauthorized: false })
      }).pipe(Effect.scoped),
    30_000
  )

  it.effect("disable and unset: no TLS; require: TLS without a check; verify-*: checked", () =>
    Effect.gen(function* () {
      assert.isFalse(yield* tlsOptions(t(undefined), undefined))
      assert.isFalse(yield* tlsOptions(t("disable"), undefined))
      assert.deepStrictEqual(yield* tlsOptions(t("require"), undefined), { rejectUnauthorized: false })
      const full = yield* tlsOptions(t("verify-full"), undefined)
      assert.deepStrictEqual(full, {}, "Node's default check: CA chain and host name")
      const ca = yield* tlsOptions(t("verify-ca"), undefined)
      assert.isObject(ca)
      assert.isUndefined((ca as { checkServerIdentity: () => undefined }).checkServerIdentity(), "any host name")
      // the ssl key wins over the URL
      assert.isFalse(yield* tlsOptions(t("verify-full"), false))
      assert.isTrue(yield* tlsOptions(t("disable"), true))
      assert.deepStrictEqual(yield* tlsOptions(t("disable"), "require"), { rejectUnauthorized: false })
      // a Unix socket never uses TLS
      assert.isFalse(yield* tlsOptions(targetOf("postgres://u@127.0.0.1/x?host=/tmp&sslmode=require"), undefined))
    })
  )

  it.effect("certificate files are read; one that cannot be read fails with ConnectionSetupError", () =>
    Effect.gen(function* () {
      const dir = mkdtempSync(join(tmpdir(), "pgbus-tls-"))
      const ca = join(dir, "ca.pem")
      writeFileSync(ca, "-----BEGIN CERTIFICATE-----\nnot really\n-----END CERTIFICATE-----\n")
      const options = yield* tlsOptions(t("verify-full", `&sslrootcert=${ca}`), undefined)
      assert.strictEqual(String((options as { ca: Buffer }).ca), readFileSync(ca, "utf8"))
      const error = yield* Effect.flip(tlsOptions(t("require", `&sslrootcert=${join(dir, "missing.pem")}`), undefined))
      assert.strictEqual(error._tag, "ConnectionSetupError")
      assert.include(error.message, "missing.pem")
      rmSync(dir, { recursive: true })
    })
  )
})
