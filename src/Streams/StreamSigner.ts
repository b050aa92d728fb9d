/**
 * Signed stream names: what a page puts in the SSE URL, so that a client can only subscribe to
 * a stream the app named for it. `<name, base64url>.<HMAC-SHA256, base64url>`; the first secret
 * signs and every configured secret verifies, so a secret is rotated by putting a new one first
 * and dropping the old one once pages signed with it are gone. A signature proves the app minted
 * the name, not that this user may read it now: the authorize hook decides that per request.
 *
 * @since 0.1.0
 */
import { createHmac, timingSafeEqual } from "node:crypto"
import { Context, Effect, Layer, Redacted } from "effect"
import { ConfigurationError } from "../Config.ts"
import * as StreamName from "./StreamName.ts"
import { StreamsConfig } from "./StreamsConfig.ts"
import { InvalidSignature, type InvalidStreamName } from "./StreamsError.ts"

const PURPOSE = "pgbus-stream:"
const MAX_SIGNED = 512

const mac = (secret: Redacted.Redacted<string>, name: string): Buffer =>
  createHmac("sha256", Redacted.value(secret))
    .update(PURPOSE + name)
    .digest()

/** Signs a name with a secret. */
export const signWith = (secret: Redacted.Redacted<string>, name: string): string =>
  `${Buffer.from(name, "utf8").toString("base64url")}.${mac(secret, name).toString("base64url")}`

/** The name a signed name carries if one of the secrets signed it. */
export const verifyWith = (secrets: ReadonlyArray<Redacted.Redacted<string>>, signed: string): string | undefined => {
  if (signed.length > MAX_SIGNED) return undefined
  const match = /^([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]{43})$/.exec(signed)
  if (match === null) return undefined
  const name = Buffer.from(match[1]!, "base64url").toString("utf8")
  const given = Buffer.from(match[2]!, "base64url")
  if (given.length !== 32) return undefined
  // every secret is tried (no early exit on the first), so timing says nothing about which matched
  let ok = false
  for (const secret of secrets) ok = timingSafeEqual(mac(secret, name), given) || ok
  return ok ? name : undefined
}

/**
 * Signs and verifies stream names with the configured secrets.
 *
 * @category services
 */
export class StreamSigner extends Context.Service<
  StreamSigner,
  {
    /** The signed form of a stream name, for a page's SSE URL. */
    readonly sign: (name: string) => Effect.Effect<string, InvalidStreamName>
    /** The stream a signed name names, if this app signed it with a secret it still has. */
    readonly verify: (signed: string) => Effect.Effect<string, InvalidSignature>
  }
>()("effect-pgbus/StreamSigner") {
  /** The signer over `StreamsConfig.secrets`; fails to build without a secret. */
  static readonly layer: Layer.Layer<StreamSigner, ConfigurationError, StreamsConfig> = Layer.effect(
    StreamSigner,
    Effect.gen(function* () {
      const { secrets } = yield* StreamsConfig
      const first = secrets[0]
      if (first === undefined) {
        return yield* new ConfigurationError({
          key: "streams.secrets",
          rule: "at least one secret (16+ characters) is needed to sign stream names (PGBUS_STREAMS_SECRET)",
          value: "<none>"
        })
      }
      return StreamSigner.of({
        sign: (name) => Effect.map(StreamName.validate(name), (valid) => signWith(first, valid)),
        verify: (signed) => {
          const name = verifyWith(secrets, signed)
          return name !== undefined && StreamName.isValid(name)
            ? Effect.succeed(name)
            : Effect.fail(new InvalidSignature({ signed }))
        }
      })
    })
  )
}
