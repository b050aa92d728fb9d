/**
 * The browser client in a real Chromium: a page subscribes with `<pgbus-stream-source>`, shows
 * committed broadcasts and never a rolled-back one, reconnects after its server restarts (a new
 * hub and HTTP server over the same database) and shows what it missed in order, once; two tabs
 * on a presence stream see each other come and go.
 */
import * as net from "node:net"
import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "effect/http"
import { SqlClient } from "effect/sql"
import type { Page } from "playwright-core"
import * as Streams from "../src/Streams/Streams.ts"
import { launchBrowser } from "./support/browser.ts"
import { broadcasterContext, eventually, startServer } from "./support/streams.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

/** A page that shows each broadcast's text in `#log` and records the client's events. */
const page = (tag: string) => `<!doctype html>
<html><head><meta charset="utf-8"><title>stream</title>
<script>
  window.received = []; window.presence = []; window.lifecycle = []
  document.addEventListener("pgbus:message", (e) => window.received.push(e.detail))
  document.addEventListener("pgbus:presence", (e) => window.presence.push({ ...e.detail, at: performance.now() }))
  for (const type of ["pgbus:open", "pgbus:connected", "pgbus:close", "pgbus:gap-detected"]) {
    document.addEventListener(type, (e) => window.lifecycle.push({ type, detail: e.detail }))
  }
  document.addEventListener("pgbus:message", (e) => {
    const li = document.createElement("li")
    li.textContent = e.detail.data.text
    document.getElementById("log").append(li)
  })
</script>
<script type="module" src="/pgbus/streams/client.js"></script>
</head><body><ul id="log"></ul>${tag}</body></html>`

/** `GET /page?stream=` renders the page with the stream's element (signed name, watermark). */
const PageRoute = HttpRouter.use((router) =>
  Effect.gen(function* () {
    const context = yield* Effect.context<Streams.StreamSigner | Streams.StreamHub>()
    yield* router.add(
      "GET",
      "/page",
      Effect.gen(function* () {
        const request = yield* HttpServerRequest.HttpServerRequest
        const stream = new URL(request.url, "http://localhost").searchParams.get("stream") ?? ""
        const tag = yield* Streams.sourceElement(stream, { presence: true }).pipe(Effect.provide(context), Effect.orDie)
        return HttpServerResponse.html(page(tag))
      })
    )
  })
)

/** The user is the `user` cookie. */
const authorize: Streams.RoutesOptions<never>["authorize"] = ({ request }) =>
  Effect.succeed(request.cookies.user === undefined ? true : { context: { id: request.cookies.user } })

const shown = (p: Page) => Effect.promise(() => p.locator("#log li").allTextContents())
const evaluate = <A>(p: Page, script: string) => Effect.promise(() => p.evaluate(script) as Promise<A>)

/** A wait that, when it times out, says what the page's client went through (a rare CI timeout). */
const explained =
  (tab: Page) =>
  <A, E, R>(wait: Effect.Effect<A, E, R>) =>
    Effect.catchDefect(wait, (defect) =>
      Effect.flatMap(
        evaluate<string>(tab, "JSON.stringify({ lifecycle: window.lifecycle, received: window.received })"),
        (page) => Effect.die(new Error(`${defect instanceof Error ? defect.message : String(defect)}; page: ${page}`))
      )
    )

/**
 * A TCP proxy to `port` on a free port; `blackhole` makes its open sockets stop passing bytes
 * both ways without closing them (a half-open connection); later sockets pass again.
 */
const proxyTo = (port: number) =>
  Effect.acquireRelease(
    Effect.callback<{ readonly url: string; readonly blackhole: () => void; readonly close: () => void }>((resume) => {
      const open = new Set<net.Socket>()
      const server = net.createServer((client) => {
        const upstream = net.connect(port, "127.0.0.1")
        open.add(client)
        client.on("data", (chunk) => (open.has(client) ? upstream.write(chunk) : undefined))
        upstream.on("data", (chunk) => (open.has(client) ? client.write(chunk) : undefined))
        client.on("error", () => upstream.destroy())
        upstream.on("error", () => client.destroy())
        client.on("close", () => upstream.destroy())
        upstream.on("close", () => client.destroy())
      })
      server.listen(0, "127.0.0.1", () => {
        const address = server.address() as net.AddressInfo
        resume(
          Effect.succeed({
            url: `http://127.0.0.1:${address.port}`,
            blackhole: () => open.clear(),
            close: () => server.close()
          })
        )
      })
    }),
    (proxy) => Effect.sync(proxy.close)
  )

layer(TestDatabase.layer(), { excludeTestServices: true, timeout: "60 seconds" })("streams in a browser", (it) => {
  describe("a page", () => {
    it.effect(
      "shows committed broadcasts, never a rolled-back one, and after its server restarts what it missed, in order, once",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const browser = yield* launchBrowser
          const tab = yield* Effect.promise(() => browser.newPage())
          const stream = "room:browser"
          // broadcasts come from a process without a hub, as from a worker
          const worker = yield* broadcasterContext
          const send = (text: string) => Streams.broadcast(stream, { text }).pipe(Effect.provide(worker))
          // a short heartbeat: a reconnect stuck on the stopping server is given up in 7 s, not 35
          const streams = { heartbeatInterval: "1 second" } as const
          const first = yield* startServer({ streams, extra: PageRoute })
          yield* Effect.promise(() => tab.goto(`${first.url}/page?stream=${stream}`))
          yield* eventually(
            "connected",
            Effect.map(
              evaluate<number>(tab, "window.lifecycle.filter((e) => e.type === 'pgbus:connected').length"),
              (n) => n === 1
            )
          )

          yield* sql.withTransaction(send("one"))
          yield* sql.withTransaction(Effect.andThen(send("never"), Effect.fail("rollback"))).pipe(Effect.ignore)
          yield* send("two")
          yield* eventually(
            "two shown",
            Effect.map(shown(tab), (texts) => texts.length === 2)
          )
          assert.deepStrictEqual(yield* shown(tab), ["one", "two"])

          yield* first.stop
          yield* eventually(
            "the page saw its connection close",
            Effect.map(
              evaluate<number>(tab, "window.lifecycle.filter((e) => e.type === 'pgbus:close').length"),
              (n) => n >= 1
            )
          )
          // while no server runs: committed broadcasts wait in the queue, a rolled-back one is gone
          yield* send("three")
          yield* sql.withTransaction(Effect.andThen(send("never again"), Effect.fail("rollback"))).pipe(Effect.ignore)
          yield* send("four")

          yield* startServer({ streams, extra: PageRoute, port: first.port })
          yield* eventually(
            "four shown",
            Effect.map(shown(tab), (texts) => texts.length >= 4),
            "30 seconds"
          ).pipe(explained(tab))
          yield* send("five")
          yield* eventually(
            "five shown",
            Effect.map(shown(tab), (texts) => texts.length >= 5),
            "30 seconds"
          ).pipe(explained(tab))
          assert.deepStrictEqual(yield* shown(tab), ["one", "two", "three", "four", "five"])
          const ids = yield* evaluate<ReadonlyArray<number>>(tab, "window.received.map((d) => d.msgId)")
          assert.deepStrictEqual(
            [...ids].sort((a, b) => a - b),
            ids,
            "in id order"
          )
          assert.strictEqual(new Set(ids).size, 5, "no duplicates")
          const connects = yield* evaluate<number>(
            tab,
            "window.lifecycle.filter((e) => e.type === 'pgbus:connected').length"
          )
          assert.strictEqual(connects, 2, "one reconnect")
        })
    )

    it.effect("a stream gone silent without closing (a half-open socket) is aborted and reconnected", () =>
      Effect.gen(function* () {
        const browser = yield* launchBrowser
        const tab = yield* Effect.promise(() => browser.newPage())
        const stream = "room:silent"
        const worker = yield* broadcasterContext
        const send = (text: string) => Streams.broadcast(stream, { text }).pipe(Effect.provide(worker))
        const server = yield* startServer({ streams: { heartbeatInterval: "500 millis" }, extra: PageRoute })
        const proxy = yield* proxyTo(server.port)
        yield* Effect.promise(() => tab.goto(`${proxy.url}/page?stream=${stream}`))
        const connects = evaluate<number>(tab, "window.lifecycle.filter((e) => e.type === 'pgbus:connected').length")
        yield* eventually(
          "connected",
          Effect.map(connects, (n) => n === 1)
        )
        const heartbeatMs = yield* evaluate<number>(
          tab,
          "window.lifecycle.find((e) => e.type === 'pgbus:connected').detail.heartbeatMs"
        )
        assert.strictEqual(heartbeatMs, 500)
        yield* send("before")
        yield* eventually(
          "before shown",
          Effect.map(shown(tab), (texts) => texts.length === 1)
        )

        proxy.blackhole()
        yield* send("during")
        // two heartbeats and 5 s of silence: the client gives up on the socket and reconnects
        yield* eventually(
          "reconnected",
          Effect.map(connects, (n) => n === 2),
          "20 seconds"
        ).pipe(explained(tab))
        yield* eventually(
          "during shown",
          Effect.map(shown(tab), (texts) => texts.length === 2)
        ).pipe(explained(tab))
        assert.deepStrictEqual(yield* shown(tab), ["before", "during"])
        const reasons = yield* evaluate<ReadonlyArray<string>>(
          tab,
          "window.lifecycle.filter((e) => e.type === 'pgbus:close').map((e) => e.detail.reason)"
        )
        assert.deepStrictEqual(reasons, ["stale"])
      })
    )

    it.effect("two tabs join a presence stream; one closes and the other sees it leave within a second", () =>
      Effect.gen(function* () {
        const browser = yield* launchBrowser
        const server = yield* startServer({
          streams: { presence: { patterns: [/^room:/] } },
          routes: { authorize },
          extra: PageRoute
        })
        const stream = "room:presence"
        const tabFor = (user: string) =>
          Effect.promise(async () => {
            const context = await browser.newContext()
            await context.addCookies([{ name: "user", value: user, url: server.url }])
            const tab = await context.newPage()
            await tab.goto(`${server.url}/page?stream=${stream}`)
            return tab
          })
        const alice = yield* tabFor("alice")
        yield* eventually(
          "alice connected",
          Effect.map(
            evaluate<number>(alice, "window.lifecycle.filter((e) => e.type === 'pgbus:connected').length"),
            (n) => n === 1
          )
        )
        const bob = yield* tabFor("bob")
        yield* eventually(
          "alice sees bob join",
          Effect.map(
            evaluate<boolean>(alice, "window.presence.some((p) => p.type === 'join' && p.memberId === 'bob')"),
            (seen) => seen
          )
        )
        const members = yield* Streams.presence(stream).members.pipe(Effect.provide(server.context))
        assert.deepStrictEqual(members.map((m) => m.memberId).sort(), ["alice", "bob"])
        assert.strictEqual(new Set(members.map((m) => m.seat)).size, 2, "a seat per tab")

        const closedAt = yield* evaluate<number>(bob, "performance.timeOrigin + performance.now()")
        yield* Effect.promise(() => alice.close())
        yield* eventually(
          "bob sees alice leave",
          Effect.map(
            evaluate<boolean>(bob, "window.presence.some((p) => p.type === 'leave' && p.memberId === 'alice')"),
            (seen) => seen
          )
        )
        const leftAt = yield* evaluate<number>(
          bob,
          "performance.timeOrigin + window.presence.find((p) => p.type === 'leave' && p.memberId === 'alice').at"
        )
        assert.isBelow(leftAt - closedAt, 1_000, `left after ${Math.round(leftAt - closedAt)} ms`)
        const after = yield* Streams.presence(stream).members.pipe(Effect.provide(server.context))
        assert.deepStrictEqual(
          after.map((m) => m.memberId),
          ["bob"]
        )
      })
    )
  })
})
