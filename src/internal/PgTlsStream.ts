/**
 * PostgreSQL's TLS start (an 8-byte SSLRequest in the clear, a one-byte answer, then a TLS
 * handshake on the same socket) done here instead of in the driver, behind a `Duplex` that
 * carries the session's cleartext: what is written to it goes out encrypted, what it emits came
 * in decrypted. The driver is then told to use no TLS of its own, and whoever holds the stream
 * reads the protocol's messages (the pool census counts a TLS connection's answers owed as a
 * plain one's). Writes made before the handshake ends wait for it, in order.
 *
 * @since 0.1.0
 */
import * as Net from "node:net"
import { Duplex } from "node:stream"
import * as Tls from "node:tls"

/** The 8-byte SSLRequest: its length, then its code. */
const SSL_REQUEST = Buffer.from([0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])

const TLS_YES = 0x53
const TLS_NO = 0x4e

/**
 * A stream of the session's cleartext over `raw` (a TCP socket, connecting or connected): it
 * asks the server for TLS when `raw` connects, and fails (destroyed with the reason) when the
 * server refuses it or the handshake fails. `host` names the server for the certificate check,
 * as the driver's own TLS start does; `options` are Node's TLS options (CA, client certificate,
 * `rejectUnauthorized`, `checkServerIdentity`, ...).
 */
export const tlsStream = (raw: Net.Socket, host: string, options: Tls.ConnectionOptions): Duplex => {
  let secure: Tls.TLSSocket | undefined
  // writes made before the session is encrypted, with their callbacks
  const pending: Array<{ readonly chunk: Buffer; readonly done: (error?: Error | null) => void }> = []

  const stream = new Duplex({
    write(chunk: Buffer, _encoding, done) {
      if (secure === undefined) pending.push({ chunk, done })
      else forward(secure, chunk, done)
    },
    read() {
      secure?.resume()
    },
    final(done) {
      if (secure === undefined) done()
      else secure.end(done)
    },
    destroy(error, done) {
      secure?.destroy()
      raw.destroy()
      for (const p of pending.splice(0)) p.done(error ?? new Error("the connection closed before TLS was set up"))
      done(error)
    }
  })

  /** One write, its callback once the socket takes more (its own back-pressure). */
  const forward = (to: Tls.TLSSocket, chunk: Buffer, done: (error?: Error | null) => void) => {
    if (to.write(chunk)) done()
    else to.once("drain", () => done())
  }

  const fail = (error: Error) => stream.destroy(error)
  raw.on("error", fail)
  raw.on("close", () => {
    if (secure === undefined) fail(new Error("the server closed the connection before TLS was set up"))
  })

  const start = () => {
    raw.once("data", (answer: Buffer) => {
      if (answer[0] === TLS_NO)
        return fail(new Error("the server does not support TLS (it answered no to the SSLRequest)"))
      if (answer[0] !== TLS_YES || answer.length !== 1)
        return fail(new Error("the server's answer to the SSLRequest was not a one-byte yes or no"))
      const tls = Tls.connect({
        host,
        ...(Net.isIP(host) === 0 ? { servername: host } : {}),
        ...options,
        socket: raw
      })
      tls.on("error", fail)
      tls.on("close", () => stream.destroy())
      tls.on("end", () => stream.push(null))
      tls.on("data", (chunk: Buffer) => {
        if (!stream.push(chunk)) tls.pause()
      })
      tls.once("secureConnect", () => {
        secure = tls
        for (const p of pending.splice(0)) forward(tls, p.chunk, p.done)
      })
    })
    raw.write(SSL_REQUEST)
  }
  if (raw.connecting) raw.once("connect", start)
  else start()
  return stream
}
