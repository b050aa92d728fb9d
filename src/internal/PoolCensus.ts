/**
 * The census of this process's database connections, for the pool gauges: the driver's pool
 * keeps its counts to itself, so effect-pgbus opens the sockets (the driver's `stream` option)
 * and counts them. A connection is in use while it is connecting, while an answer is owed
 * (each Sync or simple Query written owes one ReadyForQuery: a pipelined connection has several
 * in flight, and the first answer does not make it idle), and while the last ReadyForQuery says
 * it is inside a transaction. A connection over TLS is counted open but not read (its bytes are
 * encrypted), so `inUse` covers plain connections only.
 *
 * @since 0.1.0
 */
import * as Net from "node:net"
import { breakerFor } from "./ConnectionBreaker.ts"

/** What a socket of the census is doing, and on a plain connection the answers it is owed. */
interface Connection {
  state: "connecting" | "plain" | "tls"
  /** ReadyForQuery messages still owed: one per Sync, simple Query or FunctionCall written. */
  owed: number
  /** The transaction status of the last ReadyForQuery (`I` idle, `T` in a transaction, `E` failed). */
  status: number
}

const connections = new Map<Net.Socket, Connection>()

/** Where and how to open a socket. */
export interface SocketTarget {
  readonly host: string
  readonly port: number
  /** Idle time before TCP keepalive probes start, in milliseconds (undefined: the OS default). */
  readonly keepAliveMs: number | undefined
}

const READY_FOR_QUERY = 0x5a
const IDLE = 0x49
// the client's messages that the server answers with one ReadyForQuery each
const SYNC = 0x53
const QUERY = 0x51
const FUNCTION_CALL = 0x46

/** The 8-byte SSLRequest's code: the server answers one byte, `S` (TLS follows) or `N`. */
const SSL_REQUEST_CODE = 80877103

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
 * Opens a socket to the target (a Unix socket when the host is a directory) and counts it until
 * it closes. Its outcome feeds the target's connection breaker: ready (the server's first
 * ReadyForQuery, or its yes to TLS) is a success; closed before that is a failed attempt.
 */
export const openSocket = (target: SocketTarget): Net.Socket => {
  const breaker = breakerFor(`${target.host}:${target.port}`)
  let cancel = false
  let sslAnswer = false
  const socket = target.host.startsWith("/")
    ? Net.connect({ path: `${target.host}/.s.PGSQL.${target.port}` })
    : Net.connect({
        host: target.host,
        port: target.port,
        noDelay: true,
        ...(target.keepAliveMs !== undefined ? { keepAlive: true, keepAliveInitialDelay: target.keepAliveMs } : {})
      })
  const connection: Connection = { state: "connecting", owed: 0, status: IDLE }
  connections.set(socket, connection)
  // the start-up is over (the server's first ReadyForQuery, or its yes to TLS): a success
  const ready = (state: "plain" | "tls") => {
    connection.state = state
    breaker.succeeded()
  }
  const written = messageWalker((type) => {
    if (type === SYNC || type === QUERY || type === FUNCTION_CALL) connection.owed++
  })
  const read = messageWalker((type, first) => {
    if (type !== READY_FOR_QUERY) return
    // the first one ends the start-up, which no write of ours asked for
    if (connection.state === "connecting") ready("plain")
    else connection.owed = Math.max(connection.owed - 1, 0)
    connection.status = first ?? IDLE
  })
  const write = socket.write.bind(socket) as (...args: ReadonlyArray<unknown>) => boolean
  socket.write = ((...args: ReadonlyArray<unknown>) => {
    const chunk = args[0]
    if (chunk instanceof Uint8Array) {
      // the start-up's untyped requests: read by their code, never walked
      if (connection.state === "connecting" && chunk.length >= 8) {
        const code = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength).readInt32BE(4)
        if (chunk.length === 16 && code === CANCEL_REQUEST_CODE) {
          cancel = true
          connections.delete(socket)
        } else if (chunk.length === 8 && code === SSL_REQUEST_CODE) {
          sslAnswer = true
        }
      } else if (connection.state === "plain") {
        written(chunk)
      }
    }
    return write(...args)
  }) as Net.Socket["write"]
  socket.on("data", (chunk: Buffer) => {
    if (connection.state === "tls" || !connections.has(socket)) return
    if (sslAnswer && chunk.length > 0) {
      sslAnswer = false
      // the one-byte answer to an SSLRequest: "S", TLS follows on this socket; "N", it does not
      if (chunk[0] === 0x53) {
        ready("tls")
        return
      }
      read(chunk.subarray(1))
      return
    }
    read(chunk)
  })
  socket.once("close", () => {
    connections.delete(socket)
    if (connection.state === "connecting" && !cancel) breaker.failed()
  })
  return socket
}

/** This process's connections now: open, and in use (plain connections only, see above). */
export const census = (): { readonly open: number; readonly inUse: number } => {
  let inUse = 0
  for (const c of connections.values()) {
    if (c.state === "connecting" || (c.state === "plain" && (c.owed > 0 || c.status !== IDLE))) inUse++
  }
  return { open: connections.size, inUse }
}
