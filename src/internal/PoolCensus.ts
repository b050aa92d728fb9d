/**
 * The census of this process's database connections, for the pool gauges: the driver's pool
 * keeps its counts to itself, so effect-pgbus opens the sockets (the driver's `stream` option)
 * and counts them. A connection is in use while it is connecting, while an answer is owed
 * (each Sync or simple Query written owes one ReadyForQuery: a pipelined connection has several
 * in flight, and the first answer does not make it idle), and while the last ReadyForQuery says
 * it is inside a transaction. Over TLS the census reads the cleartext: effect-pgbus makes
 * PostgreSQL's TLS start itself (`PgTlsStream.ts`), and the driver is told to use none.
 *
 * @since 0.1.0
 */
import * as Net from "node:net"
import type { Duplex } from "node:stream"
import type * as Tls from "node:tls"
import { breakerFor } from "./ConnectionBreaker.ts"
import { tlsStream } from "./PgTlsStream.ts"

/** What a connection of the census is doing, and the answers it is owed. */
interface Connection {
  /** `ready` from the server's first ReadyForQuery (the start-up and any TLS handshake are over). */
  state: "connecting" | "ready"
  /** ReadyForQuery messages still owed: one per Sync, simple Query or FunctionCall written. */
  owed: number
  /** The transaction status of the last ReadyForQuery (`I` idle, `T` in a transaction, `E` failed). */
  status: number
}

const connections = new Map<Duplex, Connection>()

/** Where and how to open a socket. */
export interface SocketTarget {
  readonly host: string
  readonly port: number
  /** Idle time before TCP keepalive probes start, in milliseconds (undefined: the OS default). */
  readonly keepAliveMs: number | undefined
  /** Node's TLS options when the session is encrypted (PostgreSQL's TLS start is made here). */
  readonly tls: Tls.ConnectionOptions | undefined
}

const READY_FOR_QUERY = 0x5a
const IDLE = 0x49
// the client's messages that the server answers with one ReadyForQuery each
const SYNC = 0x53
const QUERY = 0x51
const FUNCTION_CALL = 0x46

/** The 16-byte CancelRequest's code: such a socket is no connection (not counted, never reported). */
const CANCEL_REQUEST_CODE = 80877102

/**
 * Reads one direction of a connection's typed messages (a type byte, a length that counts
 * itself, the body), chunk by chunk, jumping over the bodies: `onMessage` gets each message's
 * type and the first byte of its body (undefined when it has none).
 */
const messageWalker = (onMessage: (type: number, first: number | undefined) => void) => {
  let headerBytes = 0
  let type = 0
  let length = 0
  let body = 0
  let bodyStart = false
  return (chunk: Uint8Array): void => {
    let i = 0
    while (i < chunk.length) {
      if (body > 0) {
        if (bodyStart) {
          bodyStart = false
          onMessage(type, chunk[i])
        }
        const skip = Math.min(body, chunk.length - i)
        body -= skip
        i += skip
        continue
      }
      const byte = chunk[i++]!
      if (headerBytes === 0) {
        type = byte
        length = 0
      } else {
        length = length * 256 + byte
      }
      headerBytes++
      if (headerBytes === 5) {
        headerBytes = 0
        body = Math.max(length - 4, 0)
        if (body === 0) onMessage(type, undefined)
        else bodyStart = true
      }
    }
  }
}

/**
 * Opens a connection to the target (a Unix socket when the host is a directory; over TLS when
 * `tls` is set, negotiated here: see `PgTlsStream.ts`) and counts it until it closes, reading
 * the session's cleartext. Its outcome feeds the target's connection breaker: ready (the
 * server's first ReadyForQuery) is a success; closed before that is a failed attempt.
 */
export const openSocket = (target: SocketTarget): Duplex => {
  const breaker = breakerFor(`${target.host}:${target.port}`)
  let cancel = false
  const raw = target.host.startsWith("/")
    ? Net.connect({ path: `${target.host}/.s.PGSQL.${target.port}` })
    : Net.connect({
        host: target.host,
        port: target.port,
        noDelay: true,
        ...(target.keepAliveMs !== undefined ? { keepAlive: true, keepAliveInitialDelay: target.keepAliveMs } : {})
      })
  const socket: Duplex = target.tls === undefined ? raw : tlsStream(raw, target.host, target.tls)
  const connection: Connection = { state: "connecting", owed: 0, status: IDLE }
  connections.set(socket, connection)
  const written = messageWalker((type) => {
    if (type === SYNC || type === QUERY || type === FUNCTION_CALL) connection.owed++
  })
  const read = messageWalker((type, first) => {
    if (type !== READY_FOR_QUERY) return
    // the first one ends the start-up, which no write of ours asked for: a success
    if (connection.state === "connecting") {
      connection.state = "ready"
      breaker.succeeded()
    } else connection.owed = Math.max(connection.owed - 1, 0)
    connection.status = first ?? IDLE
  })
  const write = socket.write.bind(socket) as (...args: ReadonlyArray<unknown>) => boolean
  socket.write = ((...args: ReadonlyArray<unknown>) => {
    const chunk = args[0]
    if (chunk instanceof Uint8Array) {
      if (connection.state === "ready") written(chunk)
      // the start-up's untyped messages are not walked; a CancelRequest makes no connection
      else if (
        chunk.length === 16 &&
        Buffer.from(chunk.buffer, chunk.byteOffset, 16).readInt32BE(4) === CANCEL_REQUEST_CODE
      ) {
        cancel = true
        connections.delete(socket)
      }
    }
    return write(...args)
  }) as Duplex["write"]
  socket.on("data", (chunk: Buffer) => {
    if (connections.has(socket)) read(chunk)
  })
  socket.once("close", () => {
    connections.delete(socket)
    if (connection.state === "connecting" && !cancel) breaker.failed()
  })
  return socket
}

/** This process's connections now: open, and in use (see above). */
export const census = (): { readonly open: number; readonly inUse: number } => {
  let inUse = 0
  for (const c of connections.values()) {
    if (c.state === "connecting" || c.owed > 0 || c.status !== IDLE) inUse++
  }
  return { open: connections.size, inUse }
}
