// effect-pgbus stream client: served by the library at <path>/client.js, loaded as a module.
// It reads the SSE endpoint with fetch (so every event name arrives, and status codes are
// seen), keeps the position of the last frame, reconnects with backoff sending it as
// Last-Event-ID, and reports what happens as DOM events on its element (they bubble):
//   pgbus:open, pgbus:connected {connectionId, seat, position, heartbeatMs}, pgbus:gap-detected,
//   pgbus:message {msgId, event, data}, pgbus:event {event, data, msgId}, pgbus:<event>
//   {data, msgId}, pgbus:presence, pgbus:close {reason, status, willReconnect}.
// msgId is the broadcast's id (a Number, or a string past 2^53); null for an ephemeral one.

const MIN_BACKOFF_MS = 250
const MAX_BACKOFF_MS = 10_000
// a request that has no answer by then, or a stream silent for two heartbeats and this slack, is
// dead (a half-open socket, a server that stopped without closing it): abort and reconnect
const CONNECT_TIMEOUT_MS = 10_000
const STALE_SLACK_MS = 5_000
const DEFAULT_HEARTBEAT_MS = 15_000

/** One SSE field line into the event being built; returns a finished event on a blank line. */
function parseLine(state, line) {
  if (line === "") {
    const done =
      state.data === undefined ? undefined : { event: state.event || "message", data: state.data, id: state.id }
    state.event = ""
    state.data = undefined
    state.id = undefined
    return done
  }
  if (line.startsWith(":")) return undefined
  const colon = line.indexOf(":")
  const field = colon === -1 ? line : line.slice(0, colon)
  let value = colon === -1 ? "" : line.slice(colon + 1)
  if (value.startsWith(" ")) value = value.slice(1)
  if (field === "data") state.data = state.data === undefined ? value : `${state.data}\n${value}`
  else if (field === "event") state.event = value
  else if (field === "id" && !value.includes("\u0000")) state.id = value
  else if (field === "retry" && /^\d+$/.test(value)) state.retry = Number(value)
  return undefined
}

function msgIdOf(id) {
  if (id === undefined) return null
  const head = id.split("/")[0]
  if (!/^\d+$/.test(head)) return null
  const n = Number(head)
  return Number.isSafeInteger(n) ? n : head
}

function decode(data) {
  try {
    return JSON.parse(data)
  } catch {
    return data
  }
}

/** A subscription to one stream; events are dispatched on `target`. */
export class PgbusStream {
  constructor(target, options) {
    this.target = target
    this.src = options.src
    this.signedName = options.signedName
    this.replay = options.replay
    this.after = options.after
    this.seat = options.seat
    this.lastEventId = undefined
    this.connectionId = undefined
    this.attempt = 0
    this.stopped = false
    this.controller = undefined
    this.timer = undefined
    this.watchdog = undefined
    this.heartbeatMs = DEFAULT_HEARTBEAT_MS
  }

  /** Aborts `controller`'s request when `ms` pass before the next call (or the request ends). */
  watch(controller, ms) {
    clearTimeout(this.watchdog)
    this.watchdog = setTimeout(() => {
      this.stale = true
      controller.abort()
    }, ms)
  }

  start() {
    this.stopped = false
    this.connect()
  }

  stop() {
    this.stopped = true
    if (this.timer !== undefined) clearTimeout(this.timer)
    clearTimeout(this.watchdog)
    this.controller?.abort()
  }

  emit(type, detail) {
    this.target.dispatchEvent(new CustomEvent(type, { detail, bubbles: true, composed: true }))
  }

  url() {
    const url = new URL(this.src, document.baseURI)
    url.searchParams.set("stream", this.signedName)
    if (this.lastEventId === undefined) {
      if (this.after) url.searchParams.set("after", this.after)
      else if (this.replay) url.searchParams.set("replay", this.replay)
    }
    if (this.seat) url.searchParams.set("seat", this.seat)
    return url
  }

  async connect() {
    if (this.stopped) return
    const controller = new AbortController()
    this.controller = controller
    const headers = { Accept: "text/event-stream" }
    if (this.lastEventId !== undefined) headers["Last-Event-ID"] = this.lastEventId
    let status = 0
    let retryAfterMs = 0
    this.stale = false
    this.watch(controller, CONNECT_TIMEOUT_MS)
    try {
      const response = await fetch(this.url(), {
        headers,
        signal: controller.signal,
        cache: "no-store",
        credentials: "same-origin"
      })
      status = response.status
      retryAfterMs = Number(response.headers.get("retry-after") ?? "0") * 1000 || 0
      if (!response.ok || response.body === null) {
        const fatal = status === 400 || status === 403 || status === 404
        this.emit("pgbus:close", { reason: fatal ? "refused" : "unavailable", status, willReconnect: !fatal })
        if (!fatal) this.schedule(retryAfterMs)
        return
      }
      this.emit("pgbus:open", { url: String(this.url()) })
      await this.read(response.body, controller)
      this.emit("pgbus:close", { reason: "ended", status, willReconnect: !this.stopped })
    } catch (error) {
      if (this.stopped) return
      const reason = this.stale ? "stale" : "error"
      this.emit("pgbus:close", { reason, status, message: String(error), willReconnect: true })
    } finally {
      clearTimeout(this.watchdog)
    }
    this.schedule(retryAfterMs)
  }

  schedule(atLeastMs) {
    if (this.stopped) return
    const backoff = Math.min(MAX_BACKOFF_MS, MIN_BACKOFF_MS * 2 ** this.attempt)
    this.attempt++
    const delay = Math.max(atLeastMs, backoff / 2 + Math.random() * (backoff / 2))
    this.timer = setTimeout(() => this.connect(), delay)
  }

  async read(body, controller) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader()
    const state = { event: "", data: undefined, id: undefined, retry: undefined }
    let buffer = ""
    while (true) {
      // heartbeats keep a live stream from falling silent this long
      this.watch(controller, 2 * this.heartbeatMs + STALE_SLACK_MS)
      const { value, done } = await reader.read()
      if (done) return
      buffer += value
      const lines = buffer.split(/\r\n|\r|\n/)
      buffer = lines.pop() ?? ""
      for (const line of lines) {
        const event = parseLine(state, line)
        if (event !== undefined) this.dispatch(event)
      }
    }
  }

  dispatch(frame) {
    if (frame.id !== undefined) this.lastEventId = frame.id
    const data = decode(frame.data)
    switch (frame.event) {
      case "pgbus:connected":
        this.attempt = 0
        this.connectionId = data.connectionId
        if (typeof data.heartbeatMs === "number" && data.heartbeatMs > 0) this.heartbeatMs = data.heartbeatMs
        // the position after the replay: a reconnect resumes from here even if no broadcast came
        if (typeof data.position === "string") this.lastEventId = data.position
        this.emit("pgbus:connected", data)
        return
      case "pgbus:gap":
        this.emit("pgbus:gap-detected", data)
        return
      case "pgbus:presence":
        this.emit("pgbus:presence", data)
        return
    }
    const msgId = frame.id === undefined ? null : msgIdOf(frame.id)
    this.emit("pgbus:message", { msgId, event: frame.event, data, id: frame.id ?? null })
    if (frame.event === "message") {
      this.target.dispatchEvent(new MessageEvent("message", { data: frame.data, lastEventId: frame.id ?? "" }))
    } else {
      this.emit("pgbus:event", { event: frame.event, data, msgId })
      this.emit(`pgbus:${frame.event}`, { data, msgId })
    }
  }
}

/** One seat per document (kept across reconnects): two tabs are two seats. */
function documentSeat() {
  if (window.__pgbusSeat === undefined) {
    const bytes = crypto.getRandomValues(new Uint8Array(12))
    window.__pgbusSeat = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")
  }
  return window.__pgbusSeat
}

/** `<pgbus-stream-source src signed-stream-name [after] [replay] [presence]>`. */
export class PgbusStreamSource extends HTMLElement {
  connectedCallback() {
    const presence = this.hasAttribute("presence")
    this.pgbusSeat = presence ? documentSeat() : undefined
    this.stream = new PgbusStream(this, {
      src: this.getAttribute("src") ?? "/pgbus/streams",
      signedName: this.getAttribute("signed-stream-name") ?? "",
      after: this.getAttribute("after") ?? undefined,
      replay: this.getAttribute("replay") ?? undefined,
      seat: this.pgbusSeat
    })
    this.addEventListener("pgbus:connected", (event) => this.setAttribute("connection-id", event.detail.connectionId))
    this.stream.start()
  }

  disconnectedCallback() {
    this.stream?.stop()
  }

  /** The position of the last frame (what a reconnect resumes from). */
  get lastEventId() {
    return this.stream?.lastEventId
  }
}

if (typeof customElements !== "undefined" && customElements.get("pgbus-stream-source") === undefined) {
  customElements.define("pgbus-stream-source", PgbusStreamSource)
}
