/**
 * The census of this process's database connections, for the pool gauges: the driver's pool
 * keeps its counts to itself, so effect-pgbus opens the sockets (the driver's `stream` option)
 * and counts them. A connection is in use from a write until the server's ReadyForQuery says it
 * is idle outside a transaction; a connection over TLS is counted open but not read (its bytes
 * are encrypted), so `inUse` covers plain connections only.
 *
 * @since 0.1.0
 */
import * as Net from "node:net"
import { breakerFor } from "./ConnectionBreaker.ts"

/** What a socket of the census is doing. */
type State = "busy" | "idle" | "tls"

const states = new Map<Net.Socket, State>()

/** Where and how to open a socket. */
export interface SocketTarget {
  readonly host: string
  readonly port: number
  /** Idle time before TCP keepalive probes start, in milliseconds (undefined: the OS default). */
  readonly keepAliveMs: number | undefined
}

const READY_FOR_QUERY = 0x5a
const IDLE = 0x49

/** The 16-byte CancelRequest's code: such a socket is no connection (not counted, never reported). */
const CANCEL_REQUEST_CODE = 80877102

/**
 * Opens a socket to the target (a Unix socket when the host is a directory) and counts it until
 * it closes. Its outcome feeds the target's connection breaker: ready (the server's first
 * ReadyForQuery, or its yes to TLS) is a success; closed before that is a failed attempt.
 */
export const openSocket = (target: SocketTarget): Net.Socket => {
  const breaker = breakerFor(`${target.host}:${target.port}`)
  let reached = false
  let cancel = false
  const reach = () => {
    if (reached) return
    reached = true
    breaker.succeeded()
  }
  const socket = target.host.startsWith("/")
    ? Net.connect({ path: `${target.host}/.s.PGSQL.${target.port}` })
    : Net.connect({
        host: target.host,
        port: target.port,
        noDelay: true,
        ...(target.keepAliveMs !== undefined ? { keepAlive: true, keepAliveInitialDelay: target.keepAliveMs } : {})
      })
  states.set(socket, "busy")
  const write = socket.write.bind(socket) as (...args: ReadonlyArray<unknown>) => boolean
  socket.write = ((...args: ReadonlyArray<unknown>) => {
    const chunk = args[0]
    if (!reached && Buffer.isBuffer(chunk) && chunk.length === 16 && chunk.readInt32BE(4) === CANCEL_REQUEST_CODE) {
      cancel = true
      states.delete(socket)
    }
    if (states.get(socket) === "idle") states.set(socket, "busy")
    return write(...args)
  }) as Net.Socket["write"]
  socket.on("data", (chunk: Buffer) => {
    const state = states.get(socket)
    if (state === undefined || state === "tls") return
    // the one-byte answer to an SSLRequest: "S", TLS follows on this socket
    if (chunk.length === 1 && chunk[0] === 0x53 && !reached) {
      states.set(socket, "tls")
      reach()
      return
    }
    const n = chunk.length
    if (n >= 6 && chunk[n - 6] === READY_FOR_QUERY && chunk.readUInt32BE(n - 5) === 5) {
      states.set(socket, chunk[n - 1] === IDLE ? "idle" : "busy")
      reach()
    }
  })
  socket.once("close", () => {
    states.delete(socket)
    if (!reached && !cancel) breaker.failed()
  })
  return socket
}

/** This process's connections now: open, and in use (plain connections only, see above). */
export const census = (): { readonly open: number; readonly inUse: number } => {
  let inUse = 0
  for (const state of states.values()) if (state === "busy") inUse++
  return { open: states.size, inUse }
}
