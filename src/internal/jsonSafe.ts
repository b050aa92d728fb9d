/**
 * Whether a value comes back the same from JSON: a step output without an `output` Schema is
 * stored as JSON and read back on replay, so a `Date` would come back a string, a `bigint` would
 * not encode, and a class instance would lose its class. Checked once, when the step completes.
 */

const describe = (value: unknown): string => {
  if (value instanceof Date) return "a Date (JSON gives back a string)"
  if (typeof value === "bigint") return "a bigint (JSON cannot encode it)"
  if (value instanceof Map || value instanceof Set) return `a ${value.constructor.name} (JSON gives back {})`
  if (typeof value === "number") return `${value} (JSON gives back null)`
  if (typeof value === "function" || typeof value === "symbol") return `a ${typeof value} (JSON drops it)`
  if (typeof value === "object" && value !== null) {
    const name = (value as { constructor?: { name?: string } }).constructor?.name ?? "an object"
    return `an instance of ${name} (JSON gives back a plain object)`
  }
  return String(value)
}

/**
 * The first place where `value` differs from its JSON round trip (`output.at`, and what it
 * holds), or `undefined` when it survives. `undefined` properties count as absent.
 */
export const jsonMismatch = (value: unknown, path = "output"): string | undefined => {
  switch (typeof value) {
    case "string":
    case "boolean":
      return undefined
    case "number":
      return Number.isFinite(value) ? undefined : `${path} is ${describe(value)}`
    case "undefined":
      return undefined
    case "bigint":
    case "function":
    case "symbol":
      return `${path} is ${describe(value)}`
  }
  if (value === null) return undefined
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const item = value[i]
      if (item === undefined) return `${path}[${i}] is undefined (JSON gives back null)`
      const found = jsonMismatch(item, `${path}[${i}]`)
      if (found !== undefined) return found
    }
    return undefined
  }
  const proto = Object.getPrototypeOf(value)
  if (proto !== Object.prototype && proto !== null) return `${path} is ${describe(value)}`
  for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
    const found = jsonMismatch(item, `${path}.${key}`)
    if (found !== undefined) return found
  }
  return undefined
}
