/**
 * CSRF tokens for the dashboard's forms: every write is a POST whose form carries a token bound to
 * the caller (an HMAC of its actor under a secret), so a page on another site cannot make the
 * operator's browser act. The secret is random per process unless the app passes one (several
 * instances behind one load balancer need the same secret).
 *
 * @since 0.1.0
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto"

/** The form field that carries the token. */
export const CSRF_FIELD = "_csrf"

/** Tokens under one secret. */
export interface Csrf {
  /** The token of an actor's forms. */
  readonly tokenFor: (actor: string) => string
  /** Whether a submitted token is the actor's. */
  readonly verify: (actor: string, token: string | undefined) => boolean
}

/** Tokens under `secret` (a random one when none is given). */
export const makeCsrf = (secret: string | undefined): Csrf => {
  const key = secret ?? randomBytes(32).toString("base64url")
  const tokenFor = (actor: string) => createHmac("sha256", key).update(`pgbus-dashboard:${actor}`).digest("base64url")
  return {
    tokenFor,
    verify: (actor, token) => {
      if (token === undefined) return false
      const expected = Buffer.from(tokenFor(actor))
      const given = Buffer.from(token)
      return expected.length === given.length && timingSafeEqual(expected, given)
    }
  }
}
