/**
 * TLS as libpq users configure it, against a cluster of the test's own that accepts only TLS
 * connections, with a self-signed certificate for 127.0.0.1 (the server also listens on
 * 127.0.0.2, a name the certificate does not hold).
 */
import { execFileSync } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, layer } from "@effect/vitest"
import { Cause, Clock, ConfigProvider, Context, Effect, Exit, Fiber, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig, type PgBusConfigInput } from "../src/Config.ts"
import * as Database from "../src/Database.ts"
import { census } from "../src/internal/PoolCensus.ts"
import * as Job from "../src/Job/Job.ts"
import * as PgBus from "../src/PgBus.ts"
import { type PrivateCluster, privateCluster } from "./support/cluster.ts"
import { fakeServer } from "./support/fakeServer.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"

/** A key and a self-signed certificate naming 127.0.0.1 only. */
const selfSigned = () => {
  const dir = mkdtempSync(join(tmpdir(), "pgbus-cert-"))
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-days",
      "2",
      "-subj",
      "/CN=127.0.0.1",
      "-addext",
      "subjectAltName=IP:127.0.0.1",
      "-keyout",
      join(dir, "server.key"),
      "-out",
      join(dir, "server.crt")
    ],
    { stdio: "ignore" }
  )
  const cert = readFileSync(join(dir, "server.crt"), "utf8")
  const key = readFileSync(join(dir, "server.key"), "utf8")
  rmSync(dir, { recursive: true })
  return { cert, key }
}

class TlsServer extends Context.Service<TlsServer, { readonly cluster: PrivateCluster; readonly caFile: string }>()(
  "test/tls/TlsServer"
) {}

const serverLayer = Layer.effect(
  TlsServer,
  Effect.gen(function* () {
    const { cert, key } = selfSigned()
    const cluster = yield* privateCluster({
      settings: [
        "listen_addresses = '127.0.0.1,127.0.0.2'",
        "ssl = on",
        "ssl_cert_file = 'server.crt'",
        "ssl_key_file = 'server.key'"
      ],
      // TLS or nothing
      hba: ["hostssl all all 127.0.0.0/8 scram-sha-256", "hostnossl all all 0.0.0.0/0 reject"],
      files: { "server.crt": cert, "server.key": key }
    })
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => mkdtempSync(join(tmpdir(), "pgbus-ca-"))),
      (path) => Effect.sync(() => rmSync(path, { recursive: true, force: true }))
    )
    const caFile = join(dir, "root.crt")
    writeFileSync(caFile, cert)
    return { cluster, caFile }
  })
)

/** Whether a session opened with this config is encrypted (it fails when no session can be opened). */
const encrypted = (input: PgBusConfigInput, env?: Record<string, string>) => {
  const config = env === undefined ? PgBusConfig.layerWithoutEnvironment(input) : PgBusConfig.layer(input)
  return Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ readonly ssl: boolean }>`SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`
    return rows[0]?.ssl === true
  }).pipe(
    Effect.provide(Database.layer.pipe(Layer.provide(config))),
    env === undefined ? (e) => e : Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env }))
  )
}

/** Runs `body` on a pool of the TLS server's `postgres` database, with sslmode=require. */
const onRequiredTls = <A, E>(body: Effect.Effect<A, E, SqlClient.SqlClient>) =>
  Effect.gen(function* () {
    const { cluster } = yield* TlsServer
    const config = PgBusConfig.layerWithoutEnvironment({ databaseUrl: cluster.url({ query: "sslmode=require" }) })
    return yield* body.pipe(Effect.provide(Database.layer.pipe(Layer.provide(config))))
  })

/** The failure of a connection that must not be made, as text. */
const refused = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.exit(effect), (exit) => {
    assert.isTrue(Exit.isFailure(exit), "the connection was refused")
    return Exit.isFailure(exit) ? Cause.pretty(exit.cause) : ""
  })

layer(serverLayer, { excludeTestServices: true, timeout: "120 seconds" })("TLS", (it) => {
  it.effect("without TLS the server refuses the session: it requires TLS", () =>
    Effect.gen(function* () {
      const { cluster } = yield* TlsServer
      const why = yield* refused(encrypted({ databaseUrl: cluster.url() }))
      assert.match(why, /pg_hba\.conf|no encryption/)
    })
  )

  it.effect("sslmode=require in the URL encrypts without checking the certificate", () =>
    Effect.gen(function* () {
      const { cluster } = yield* TlsServer
      assert.isTrue(yield* encrypted({ databaseUrl: cluster.url({ query: "sslmode=require" }) }))
    })
  )

  it.effect("the ssl key (in code) wins over the URL's sslmode", () =>
    Effect.gen(function* () {
      const { cluster } = yield* TlsServer
      assert.isTrue(yield* encrypted({ databaseUrl: cluster.url({ query: "sslmode=disable" }), ssl: "require" }))
      assert.isTrue(yield* encrypted({ databaseUrl: cluster.url(), ssl: { rejectUnauthorized: false } }))
    })
  )

  it.effect("prefer encrypts when the server offers TLS", () =>
    Effect.gen(function* () {
      const { cluster } = yield* TlsServer
      assert.isTrue(yield* encrypted({ databaseUrl: cluster.url({ query: "sslmode=prefer" }) }))
    })
  )

  it.effect(
    "verify-ca: refused without the CA (self-signed), accepted with sslrootcert for any of the server's names",
    () =>
      Effect.gen(function* () {
        const { cluster, caFile } = yield* TlsServer
        const why = yield* refused(encrypted({ databaseUrl: cluster.url({ query: "sslmode=verify-ca" }) }))
        assert.match(why, /self[- ]signed|certificate/i)
        const query = `sslmode=verify-ca&sslrootcert=${encodeURIComponent(caFile)}`
        assert.isTrue(yield* encrypted({ databaseUrl: cluster.url({ query }) }))
        assert.isTrue(yield* encrypted({ databaseUrl: cluster.url({ host: "127.0.0.2", query }) }))
      })
  )

  it.effect("verify-full: accepted for the name the certificate holds, refused for another", () =>
    Effect.gen(function* () {
      const { cluster, caFile } = yield* TlsServer
      const query = `sslmode=verify-full&sslrootcert=${encodeURIComponent(caFile)}`
      assert.isTrue(yield* encrypted({ databaseUrl: cluster.url({ query }) }))
      const why = yield* refused(encrypted({ databaseUrl: cluster.url({ host: "127.0.0.2", query }) }))
      assert.match(why, /127\.0\.0\.2|altname|does not match/i)
    })
  )

  it.effect(
    "libpq's variables alone (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE) reach the server",
    () =>
      Effect.gen(function* () {
        const { cluster, caFile } = yield* TlsServer
        const env = {
          PGHOST: "127.0.0.1",
          PGPORT: String(cluster.port),
          PGUSER: "postgres",
          PGPASSWORD: cluster.password,
          PGDATABASE: "postgres",
          PGSSLMODE: "verify-full",
          PGSSLROOTCERT: caFile
        }
        assert.isTrue(yield* encrypted({}, env))
        // PGBUS_SSL is the ssl key: it wins over PGSSLMODE
        const why = yield* refused(encrypted({}, { ...env, PGBUS_SSL: "disable" }))
        assert.match(why, /pg_hba\.conf|no encryption/)
      })
  )

  it.effect("the pool gauge counts a TLS connection while its statement runs, and not after", () =>
    onRequiredTls(
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        // a result of 5 MB, decrypted in many chunks: the census reads the messages across them
        const big = yield* sql`SELECT repeat('x', 1000) AS x FROM generate_series(1, 5000)`
        assert.strictEqual(big.length, 5000)
        const before = census().inUse
        const sleeping = yield* Effect.forkChild(
          sql<{
            readonly ssl: boolean
          }>`SELECT s.ssl, pg_sleep(1.5)::text FROM pg_stat_ssl s WHERE s.pid = pg_backend_pid()`
        )
        yield* eventually(
          "the TLS connection in use",
          Effect.sync(() => census().inUse >= before + 1)
        )
        const [row] = yield* Fiber.join(sleeping)
        assert.isTrue(row?.ssl)
        yield* eventually(
          "the TLS connection idle again",
          Effect.sync(() => census().inUse <= before)
        )
      })
    )
  )

  it.effect(
    "an interrupted statement over TLS is cancelled on the server (the cancel request makes its own TLS start)",
    () =>
      onRequiredTls(
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const sleeping = () =>
            Effect.map(
              sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
              WHERE state = 'active' AND query LIKE '%pg_sleep(30)%' AND pid <> pg_backend_pid()`,
              (rows) => rows[0]?.n ?? 0
            )
          const long = yield* Effect.forkChild(sql`SELECT pg_sleep(30)`)
          yield* eventually(
            "the statement runs",
            Effect.map(sleeping(), (n) => n === 1)
          )
          yield* Fiber.interrupt(long)
          yield* eventually(
            "the server cancelled it",
            Effect.map(sleeping(), (n) => n === 0)
          )
        })
      )
  )

  it.effect(
    "over TLS end to end: a job sent with its NOTIFY is run by a supervisor (pool, LISTEN, workers' session)",
    () =>
      Effect.gen(function* () {
        const { cluster } = yield* TlsServer
        const ran: Array<number> = []
        const Ping = Job.make(
          "TlsPing",
          { payload: Schema.Struct({ n: Schema.Number }), queue: "tls_pings" },
          ({ n }) => Effect.sync(() => ran.push(n))
        )
        const config = PgBusConfig.layerWithoutEnvironment({
          databaseUrl: cluster.url({ query: "sslmode=require" }),
          migrate: true,
          // no hand-over inside the process: the jobs must come through NOTIFY, LISTEN, read and claim
          localDispatch: false,
          pollingInterval: "30 seconds"
        })
        yield* Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          yield* startSupervisor([Ping])
          // the worker's LISTEN is up (its connection's last statement), so that a NOTIFY reaches it
          yield* eventually(
            "the worker listens",
            Effect.map(
              sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE 'LISTEN %'`,
              (rows) => (rows[0]?.n ?? 0) > 0
            )
          )
          yield* Effect.forEach([1, 2, 3], (n) => Ping.enqueue({ n }), { discard: true })
          // the poll is 30 s away: only the NOTIFY over the LISTEN connection wakes the worker in time
          yield* eventually(
            "the three jobs ran",
            Effect.sync(() => ran.length === 3)
          )
          // past its start (a user): a connection still starting has not yet asked for TLS (seen
          // 18-25 ms into a connection the pool was opening: flaky, 1 run in 4)
          const plain = yield* sql<{ readonly n: number }>`
          SELECT count(*)::int AS n FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
          WHERE a.backend_type = 'client backend' AND a.usename IS NOT NULL AND NOT s.ssl`
          assert.strictEqual(plain[0]?.n, 0)
          assert.deepStrictEqual([...ran].sort(), [1, 2, 3])
        }).pipe(Effect.scoped, Effect.provide(PgBus.layerFrom(config)))
      })
  )
})

/** A server that answers an SSLRequest with `answer` (and says nothing more). */
const answeringServer = (answer: Buffer) =>
  Effect.map(
    fakeServer((socket) => socket.once("data", () => socket.write(answer))),
    ({ port }) => port
  )

/** A server that takes connections and never answers (a firewall or a proxy that hangs). */
// it reads (and drops) what comes, so that the client's end is seen
const silentServer = fakeServer((socket) => socket.resume())

layer(Layer.empty, { excludeTestServices: true, timeout: "60 seconds" })("TLS refused", (it) => {
  it.effect(
    "a server that never answers the SSLRequest: the connection ends at the URL's connect_timeout, its socket closed and no longer counted",
    () =>
      Effect.gen(function* () {
        const { port, taken } = yield* silentServer
        const before = census().open
        const started = yield* Clock.currentTimeMillis
        const why = yield* refused(
          encrypted({ databaseUrl: `postgres://u@127.0.0.1:${port}/db?sslmode=require&connect_timeout=7` })
        )
        const waited = (yield* Clock.currentTimeMillis) - started
        assert.match(why, /timed out/i)
        // the URL's 7 s, not the driver's own 5 s
        assert.isAtLeast(waited, 6_500)
        assert.isAbove(taken.length, 0, "the server took the connection")
        // the socket the TLS start waited on is closed on both ends, and the census counts it no more
        yield* eventually(
          "the connection closed",
          Effect.sync(() => census().open === before && taken.every((socket) => socket.readableEnded))
        )
      }).pipe(Effect.scoped)
  )

  it.effect("sslmode=require against a server that answers no to TLS fails, saying so", () =>
    Effect.gen(function* () {
      const port = yield* answeringServer(Buffer.from("N"))
      const why = yield* refused(encrypted({ databaseUrl: `postgres://u@127.0.0.1:${port}/db?sslmode=require` }))
      assert.match(why, /does not support TLS/)
    }).pipe(Effect.scoped)
  )

  it.effect("bytes after the server's yes to TLS are refused, not read as the session's", () =>
    Effect.gen(function* () {
      const port = yield* answeringServer(Buffer.from("SZ"))
      const why = yield* refused(encrypted({ databaseUrl: `postgres://u@127.0.0.1:${port}/db?sslmode=require` }))
      assert.match(why, /not a one-byte yes or no/)
    }).pipe(Effect.scoped)
  )
})
