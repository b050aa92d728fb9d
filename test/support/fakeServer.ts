/**
 * A fake server on a loopback port of its own, for the start of a connection (what a server
 * answers to an SSLRequest, or that it never answers): `onConnection` gets each socket it takes.
 * The sockets it took are destroyed and the server closed with the scope.
 */
import * as Net from "node:net"
import { Effect } from "effect"

/** Listens on 127.0.0.1; gives its port and the sockets it has taken so far. */
export const fakeServer = (onConnection: (socket: Net.Socket) => void) =>
  Effect.acquireRelease(
    Effect.callback<{ readonly server: Net.Server; readonly taken: Array<Net.Socket> }>((resume) => {
      const taken: Array<Net.Socket> = []
      const server = Net.createServer((socket) => {
        taken.push(socket)
        socket.on("error", () => {})
        onConnection(socket)
      })
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed({ server, taken })))
    }),
    ({ server, taken }) =>
      Effect.callback<void>((resume) => {
        for (const socket of taken) socket.destroy()
        server.close(() => resume(Effect.void))
      })
  ).pipe(Effect.map(({ server, taken }) => ({ port: (server.address() as Net.AddressInfo).port, taken })))
