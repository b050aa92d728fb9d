/**
 * Where the database is and how to reach it, as libpq users expect: a URL (query parameters
 * `host`, `port`, `user`, `password`, `dbname`, `sslmode`, `sslrootcert`, `sslcert`, `sslkey`,
 * `connect_timeout` included) whose missing parts come from `PGHOST`, `PGPORT`, `PGUSER`,
 * `PGPASSWORD`, `PGDATABASE`, `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`,
 * `PGCONNECT_TIMEOUT`, then from the defaults; and the TLS options the driver gets for an
 * `sslmode` or the `ssl` config key.
 *
 * @since 0.1.0
 */
import { readFile } from "node:fs/promises"
import * as Net from "node:net"
import type { ConnectionOptions } from "node:tls"
import { Duration, Effect, Schema } from "effect"

/** libpq's `sslmode` values. */
export const SSL_MODES = ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] as const

/** One of libpq's `sslmode` values. */
export type SslMode = (typeof SSL_MODES)[number]

/**
 * The `ssl` config key: an sslmode, `true` (TLS, certificate checked as Node checks it) or
 * `false`, or Node's TLS options (code only). Unset, the URL's `sslmode` (or `PGSSLMODE`) decides.
 */
export type SslSetting = boolean | SslMode | ConnectionOptions

/** The libpq environment variables read when the URL leaves their part out. */
export const LIBPQ_VARIABLES = [
  "PGHOST",
  "PGPORT",
  "PGUSER",
  "PGPASSWORD",
  "PGDATABASE",
  "PGSSLMODE",
  "PGSSLROOTCERT",
  "PGSSLCERT",
  "PGSSLKEY",
  "PGCONNECT_TIMEOUT"
] as const

/** Values of environment variables by name (absent or `undefined` when unset). */
export type Environment = Readonly<Record<string, string | undefined>>

/** What is used when neither the URL nor the environment names a part. */
export const DEFAULTS = { host: "127.0.0.1", port: "5432", user: "postgres" } as const

/** How long a connection may take when `connect_timeout` is not given (as the driver's own default). */
export const DEFAULT_CONNECT_TIMEOUT = Duration.seconds(5)

/** Every part of a connection, read from a URL that `completeUrl` filled. */
export interface Target {
  /** A host name or address, or a directory holding the server's Unix socket (starts with `/`). */
  readonly host: string
  readonly port: number
  readonly database: string
  readonly username: string
  readonly password: string | undefined
  readonly sslmode: SslMode | undefined
  readonly sslrootcert: string | undefined
  readonly sslcert: string | undefined
  readonly sslkey: string | undefined
  /** How long a connection may take to be made and logged in (`connect_timeout`); undefined: `DEFAULT_CONNECT_TIMEOUT`. */
  readonly connectTimeout: Duration.Duration | undefined
}

/**
 * A connection failed to be set up before the first query: a certificate file that cannot be
 * read, an `sslmode` libpq does not know.
 *
 * @category errors
 */
export class ConnectionSetupError extends Schema.TaggedError<ConnectionSetupError>()("ConnectionSetupError", {
  detail: Schema.String
}) {
  override get message(): string {
    return `cannot set up the database connection: ${this.detail}`
  }
}

const nonEmpty = (value: string | null | undefined): string | undefined =>
  value === null || value === undefined || value === "" ? undefined : value

const decode = (value: string): string => {
  try {
    return decodeURIComponent(value)
  } catch {
    return value
  }
}

/** The parts a URL names itself (authority first, then query parameters, as libpq reads it). */
const partsOf = (url: URL) => {
  const q = (name: string) => nonEmpty(url.searchParams.get(name))
  const hostname = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : decode(url.hostname)
  return {
    host: q("host") ?? nonEmpty(hostname),
    port: q("port") ?? nonEmpty(url.port),
    user: q("user") ?? nonEmpty(decode(url.username)),
    password: q("password") ?? nonEmpty(decode(url.password)),
    database: q("dbname") ?? nonEmpty(decode(url.pathname.replace(/^\//, ""))),
    sslmode: q("sslmode"),
    sslrootcert: q("sslrootcert"),
    sslcert: q("sslcert"),
    sslkey: q("sslkey"),
    connectTimeout: q("connect_timeout")
  }
}

/**
 * libpq's `connect_timeout`: whole seconds; zero or less waits without a bound, and 1 counts as
 * 2 (libpq's minimum). A value that is not a whole number is an error (`undefined` here).
 */
export const connectTimeoutOf = (text: string): Duration.Duration | undefined => {
  if (!/^\s*[-+]?\d+\s*$/.test(text)) return undefined
  const seconds = Number(text)
  return seconds <= 0 ? Duration.infinity : Duration.seconds(Math.max(seconds, 2))
}

/** The query parameters a URL may give that effect-pgbus reads (libpq's, above). */
export const READ_PARAMETERS: ReadonlyArray<string> = [
  "host",
  "port",
  "user",
  "password",
  "dbname",
  "sslmode",
  "sslrootcert",
  "sslcert",
  "sslkey",
  "connect_timeout"
]

/** Where other tools' query parameters have their effect-pgbus counterpart. */
const COUNTERPARTS: Readonly<Record<string, string>> = {
  pgbouncer: "the transactionPooler key (PGBUS_TRANSACTION_POOLER)",
  connection_limit: "the poolSize key (PGBUS_POOL_SIZE)",
  pool_timeout: "the poolTimeout key (PGBUS_POOL_TIMEOUT)",
  statement_timeout: "the statementTimeout key (PGBUS_STATEMENT_TIMEOUT)",
  schema: "the schema key (PGBUS_SCHEMA) for effect-pgbus's own tables",
  ssl: "sslmode, or the ssl key (PGBUS_SSL)"
}

/**
 * The URL's query parameters that effect-pgbus does not read (libpq would refuse some, other
 * tools read others), each with where its setting goes instead when there is such a place: for a
 * warning, since a URL shared with another tool may carry them.
 */
export const unreadParameters = (url: string): ReadonlyArray<string> => {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return []
  }
  const names = [...new Set(parsed.searchParams.keys())].filter((name) => !READ_PARAMETERS.includes(name))
  return names.map((name) => (COUNTERPARTS[name] === undefined ? name : `${name} (use ${COUNTERPARTS[name]})`))
}

/**
 * The URL with every part it leaves out filled in: from libpq's environment variables first
 * (`PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`, `PGSSL*`, `PGCONNECT_TIMEOUT`), then
 * from the defaults (127.0.0.1, 5432, user `postgres`, the database named like the user).
 * `undefined` starts from nothing. A URL that names every part, or that does not parse, is
 * returned as it is.
 */
export const completeUrl = (given: string | undefined, env: Environment): string => {
  let url: URL
  try {
    url = new URL(given ?? "postgres://")
  } catch {
    return given ?? ""
  }
  if (url.protocol !== "postgres:" && url.protocol !== "postgresql:") return given ?? ""
  const own = partsOf(url)
  let changed = false
  const fill = <K extends keyof typeof own>(part: K, ...candidates: ReadonlyArray<string | undefined>) => {
    if (own[part] !== undefined) return own[part]
    const value = candidates.map(nonEmpty).find((c) => c !== undefined)
    if (value !== undefined) changed = true
    return value
  }
  const host = fill("host", env.PGHOST, DEFAULTS.host)!
  const port = fill("port", env.PGPORT, DEFAULTS.port)!
  const user = fill("user", env.PGUSER, DEFAULTS.user)!
  const password = fill("password", env.PGPASSWORD)
  const database = fill("database", env.PGDATABASE, user)!
  // the query parameters libpq's variables can fill
  const parameters = {
    sslmode: fill("sslmode", env.PGSSLMODE),
    sslrootcert: fill("sslrootcert", env.PGSSLROOTCERT),
    sslcert: fill("sslcert", env.PGSSLCERT),
    sslkey: fill("sslkey", env.PGSSLKEY),
    connect_timeout: fill("connectTimeout", env.PGCONNECT_TIMEOUT)
  }
  if (!changed && given !== undefined) return given
  const out = new URL("postgres://")
  if (host.startsWith("/") || host.includes(":")) {
    // a socket directory (or an IPv6 address) goes in query parameters, and so must the rest
    // of the authority: a URL without a host name cannot hold a user, a password or a port
    out.searchParams.set("host", host)
    out.searchParams.set("port", port)
    out.searchParams.set("user", user)
    if (password !== undefined) out.searchParams.set("password", password)
  } else {
    out.hostname = host
    out.port = port
    out.username = encodeURIComponent(user)
    if (password !== undefined) out.password = encodeURIComponent(password)
  }
  out.pathname = `/${encodeURIComponent(database)}`
  for (const [name, value] of url.searchParams) {
    if (!["host", "port", "user", "password", "dbname"].includes(name)) out.searchParams.set(name, value)
  }
  for (const [name, value] of Object.entries(parameters)) if (value !== undefined) out.searchParams.set(name, value)
  return out.toString()
}

/** Reads a URL that `completeUrl` filled; a part it still lacks takes the default. */
export const targetOf = (url: string): Target => {
  const parts = partsOf(new URL(url))
  const username = parts.user ?? DEFAULTS.user
  return {
    host: parts.host ?? DEFAULTS.host,
    port: Number(parts.port ?? DEFAULTS.port),
    database: parts.database ?? username,
    username,
    password: parts.password,
    sslmode: SSL_MODES.find((m) => m === parts.sslmode),
    sslrootcert: parts.sslrootcert,
    sslcert: parts.sslcert,
    sslkey: parts.sslkey,
    connectTimeout: parts.connectTimeout === undefined ? undefined : connectTimeoutOf(parts.connectTimeout)
  }
}

/** `host:port/database`, never the password: for logs and the boot banner. */
export const describeUrl = (url: string): string => {
  try {
    const target = targetOf(url)
    return `${target.host}:${target.port}/${target.database}`
  } catch {
    return "unknown"
  }
}

const readPem = (path: string, what: string) =>
  Effect.tryPromise({
    try: () => readFile(path),
    catch: (error) =>
      new ConnectionSetupError({
        detail: `cannot read the ${what} ${path}: ${error instanceof Error ? error.message : String(error)}`
      })
  })

/**
 * Whether the server answers an SSLRequest with "S" (it speaks TLS): how `prefer` decides,
 * once per pool, since the driver cannot fall back per connection without checking the
 * certificate. A server that cannot be reached counts as "no": connecting will report it. The
 * answer is awaited as long as a connection may take (`connect_timeout`, else 5 s): a server
 * slow to answer (a serverless one waking) is not taken for one without TLS.
 */
const offersTls = (host: string, port: number, timeout: Duration.Duration): Effect.Effect<boolean> =>
  Effect.callback<boolean>((resume) => {
    const socket = Net.connect({ host, port })
    const done = (answer: boolean) => {
      socket.destroy()
      resume(Effect.succeed(answer))
    }
    socket.once("connect", () => {
      const request = Buffer.alloc(8)
      request.writeInt32BE(8, 0)
      request.writeInt32BE(80877103, 4)
      socket.write(request)
    })
    socket.once("data", (chunk) => done(chunk[0] === 0x53))
    socket.once("error", () => done(false))
    socket.once("close", () => done(false))
    return Effect.sync(() => socket.destroy())
  }).pipe(
    Duration.isFinite(timeout)
      ? Effect.timeoutOrElse({ duration: timeout, orElse: () => Effect.succeed(false) })
      : (probe) => probe
  )

/**
 * The TLS of a target's connections (`false`, `true` for Node's defaults, or Node's TLS options;
 * the TLS start itself is made by `internal/PgTlsStream.ts`, not the driver) from the `ssl`
 * config key (which wins over the URL's `sslmode`), as libpq reads the modes: `disable` no TLS;
 * `allow` and `prefer` TLS without a certificate check when the server offers it; `require`
 * TLS without a check (a CA check when `sslrootcert` is given); `verify-ca` the chain against
 * `sslrootcert` (else Node's CAs); `verify-full` the chain and the host name. Nothing set: no
 * TLS. `sslcert`/`sslkey` give a client certificate.
 */
export const tlsOptions = (
  target: Target,
  setting: SslSetting | undefined
): Effect.Effect<boolean | ConnectionOptions, ConnectionSetupError> =>
  Effect.gen(function* () {
    if (typeof setting === "object") return setting
    if (setting === true) return true
    const mode: SslMode = setting === false ? "disable" : (setting ?? target.sslmode ?? "disable")
    // libpq never uses TLS on a Unix socket
    if (mode === "disable" || target.host.startsWith("/")) return false
    const ca =
      target.sslrootcert && target.sslrootcert !== "system"
        ? yield* readPem(target.sslrootcert, "sslrootcert")
        : undefined
    const cert = target.sslcert ? yield* readPem(target.sslcert, "sslcert") : undefined
    const key = target.sslkey ? yield* readPem(target.sslkey, "sslkey") : undefined
    const client = { ...(cert ? { cert } : {}), ...(key ? { key } : {}) }
    switch (mode) {
      case "allow":
      case "prefer":
        return (yield* offersTls(target.host, target.port, target.connectTimeout ?? DEFAULT_CONNECT_TIMEOUT))
          ? { ...client, rejectUnauthorized: false }
          : false
      case "require":
        return ca ? { ...client, ca, checkServerIdentity: () => undefined } : { ...client, rejectUnauthorized: false }
      case "verify-ca":
        return { ...client, ...(ca ? { ca } : {}), checkServerIdentity: () => undefined }
      case "verify-full":
        return { ...client, ...(ca ? { ca } : {}) }
    }
  })
