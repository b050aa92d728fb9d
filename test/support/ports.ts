/** A TCP port on 127.0.0.1 that was free a moment ago (for servers a test starts of its own). */
import { createServer } from "node:net"
import { Effect } from "effect"

/** Asks the system for a free port, then gives it back. */
export const freePortPromise = (): Promise<number> =>
  new Promise<number>((resolve) => {
    const probe = createServer()
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address()
      probe.close(() => resolve(typeof address === "object" && address ? address.port : 0))
    })
  })

/** A free port. */
export const freePort: Effect.Effect<number> = Effect.promise(freePortPromise)
