/**
 * The kinds of configuration keys. A kind knows how a value is read from the environment (a
 * string) or taken from code, the Schema its resolved value must pass, and so the key's two
 * types: what services read (`S["Type"]`) and what code may pass (`Input`). `Config.ts` lists
 * one row per key built from these kinds; everything else is derived from the rows.
 */
import type { ConnectionOptions } from "node:tls"
import { Duration, Option, Redacted, Result, Schema } from "effect"
import { SSL_MODES, type SslSetting } from "../Connection.ts"

/** What a kind turns a raw value into: a candidate for its Schema, or the rule it broke. */
export type Parsed = Result.Result<unknown, string>

/** How one kind of key is read, checked and typed. */
export interface Kind<S extends Schema.Constraint, Input> {
  /** The rule the resolved value must keep. */
  readonly schema: S
  /** A value given in code (any value at run time: callers may be untyped). */
  fromCode(value: Input): Parsed
  /** A value read from the environment; `undefined` for keys only code can set. */
  readonly fromEnv: ((text: string) => Parsed) | undefined
  /** How the docs show a value of this kind. */
  show(value: Input): string
}

const ok = (value: unknown): Parsed => Result.succeed(value)
const no = (rule: string): Parsed => Result.fail(rule)
const fromAny = <Input>(kind: Kind<Schema.Constraint, Input>, value: unknown): Parsed => kind.fromCode(value as Input)

/** A string. */
export const string = <S extends Schema.ConstraintCodec<string, unknown>>(schema: S): Kind<S, string> => ({
  schema,
  fromCode: (value) => (typeof value === "string" ? ok(value) : no("must be a string")),
  fromEnv: ok,
  show: (value) => value
})

/** One of a few words. */
export const literals = <const L extends ReadonlyArray<string>>(values: L): Kind<Schema.Literals<L>, L[number]> => ({
  schema: Schema.Literals(values),
  fromCode: (value) => (typeof value === "string" ? ok(value) : no(`must be one of ${values.join(", ")}`)),
  fromEnv: (text) => ok(text.trim()),
  show: (value) => value
})

const number = <S extends Schema.ConstraintCodec<number, unknown>>(schema: S, integer: boolean): Kind<S, number> => {
  const fromCode = (value: unknown): Parsed => {
    if (typeof value !== "number" || !Number.isFinite(value)) return no("must be a finite number")
    return integer && !Number.isInteger(value) ? no("must be an integer") : ok(value)
  }
  return {
    schema,
    fromCode,
    fromEnv: (text) => (text.trim() === "" ? no("must be a finite number") : fromCode(Number(text))),
    show: String
  }
}

/** An integer. */
export const int = <S extends Schema.ConstraintCodec<number, unknown>>(schema: S): Kind<S, number> =>
  number(schema, true)

/** A finite number. */
export const decimal = <S extends Schema.ConstraintCodec<number, unknown>>(schema: S): Kind<S, number> =>
  number(schema, false)

const TRUE = ["true", "1", "yes", "on"]
const FALSE = ["false", "0", "no", "off"]

/** A boolean; the environment may say true/false, 1/0, yes/no, on/off. */
export const boolean: Kind<typeof Schema.Boolean, boolean> = {
  schema: Schema.Boolean,
  fromCode: (value) => (typeof value === "boolean" ? ok(value) : no("must be a boolean")),
  fromEnv: (text) => {
    const word = text.trim().toLowerCase()
    return TRUE.includes(word) ? ok(true) : FALSE.includes(word) ? ok(false) : no("must be a boolean")
  },
  show: String
}

const DURATION_RULE = "must be a duration (seconds, or e.g. '500 millis')"

/**
 * A duration: `Duration.Input` in code; in the environment a bare number is seconds (as the
 * seeds' reference says), otherwise an Effect duration string such as `500 millis`.
 */
export const duration = <S extends Schema.ConstraintCodec<Duration.Duration, unknown>>(
  schema: S
): Kind<S, Duration.Input> => ({
  schema,
  fromCode: (value) => {
    if (typeof value === "number" && !Number.isFinite(value)) return no(DURATION_RULE)
    return Option.match(Duration.fromInput(value), { onNone: () => no(DURATION_RULE), onSome: ok })
  },
  fromEnv: (text) => {
    const trimmed = text.trim()
    if (/^-?\d+(\.\d+)?$/.test(trimmed)) return ok(Duration.seconds(Number(trimmed)))
    return Option.match(Duration.fromInput(trimmed as Duration.Input), { onNone: () => no(DURATION_RULE), onSome: ok })
  },
  show: (value) => (Duration.isDuration(value) ? Duration.format(value) : String(value))
})

/** A PostgreSQL URL, kept redacted (it may hold a password); `check` says what is wrong with one. */
export const url = (
  check: (url: string) => string | undefined
): Kind<Schema.Redacted<typeof Schema.String>, string | Redacted.Redacted<string>> => {
  const fromText = (text: string): Parsed => {
    const problem = check(text)
    return problem === undefined ? ok(Redacted.make(text)) : no(problem)
  }
  return {
    schema: Schema.Redacted(Schema.String),
    fromCode: (value) => {
      const text = Redacted.isRedacted(value) ? Redacted.value(value) : value
      return typeof text === "string" ? fromText(text) : no("must be a string")
    },
    fromEnv: fromText,
    show: (value) => (Redacted.isRedacted(value) ? "<redacted>" : value)
  }
}

/** A function given in code (a resolver); the environment cannot set one. */
export const fn = <F extends (input: never) => unknown>(): Kind<Schema.declare<F>, F> => ({
  schema: Schema.declare<F>((u): u is F => typeof u === "function", { expected: "a function" }),
  fromCode: (value) => (typeof value === "function" ? ok(value) : no("must be a function (set it in code)")),
  fromEnv: undefined,
  show: () => "a function"
})

const isTlsOptions = (u: unknown): u is ConnectionOptions => typeof u === "object" && u !== null && !Array.isArray(u)

/** The TLS setting: a libpq sslmode or a boolean in the environment, also Node's TLS options in code. */
export const ssl: Kind<
  Schema.Union<readonly [typeof Schema.Boolean, Schema.Literals<typeof SSL_MODES>, Schema.declare<ConnectionOptions>]>,
  SslSetting
> = {
  schema: Schema.Union([
    Schema.Boolean,
    Schema.Literals(SSL_MODES),
    Schema.declare<ConnectionOptions>(isTlsOptions, { expected: "TLS options" })
  ]),
  fromCode: (value) =>
    typeof value === "boolean" ||
    isTlsOptions(value) ||
    (typeof value === "string" && SSL_MODES.includes(value as never))
      ? ok(value)
      : no(`must be a boolean, TLS options or one of ${SSL_MODES.join(", ")}`),
  fromEnv: (text) => {
    const word = text.trim().toLowerCase()
    if (SSL_MODES.includes(word as never)) return ok(word)
    return boolean.fromEnv!(word).pipe(Result.mapError(() => `must be true, false or one of ${SSL_MODES.join(", ")}`))
  },
  show: (value) => (isTlsOptions(value) ? "TLS options" : String(value))
}

/** Words that mean "unset" for an optional key in the environment. */
const NONE = ["", "none"]

/**
 * An optional key: `null` in code and `none` (or an empty value) in the environment unset it;
 * the resolved value is then `undefined`.
 */
export const optional = <S extends Schema.Constraint, Input>(
  kind: Kind<S, Input>
): Kind<Schema.UndefinedOr<S>, Input | null> => ({
  schema: Schema.UndefinedOr(kind.schema),
  fromCode: (value) => (value === null ? ok(undefined) : fromAny(kind, value)),
  fromEnv:
    kind.fromEnv === undefined
      ? undefined
      : (text) => (NONE.includes(text.trim().toLowerCase()) ? ok(undefined) : kind.fromEnv!(text)),
  show: (value) => (value === null ? "none" : kind.show(value))
})
