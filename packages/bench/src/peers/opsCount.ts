/**
 * BENCH_OURS_OPS: counts the Effect primitives every fiber evaluates while a bench records, by
 * primitive and by the innermost span the fiber runs in (a load-independent measure of the work
 * per job or run), through a tracer's per-primitive `context` hook. With a span name as `detail`
 * (or "(none)"), that span's primitives are also counted by the source of their function.
 */
const EFFECT = "~effect/Effect"
const EVALUATE = "~effect/Effect/evaluate"
const IDENTIFIER = "~effect/Effect/identifier"
type Primitive = Record<string, unknown> & { readonly [EVALUATE]: (fiber: unknown) => unknown }

/** A primitive counter: `context` is the tracer hook, `total` and `by` what it counted. */
export interface OpsCounter {
  readonly context: <X>(primitive: unknown, fiber: unknown) => X
  readonly total: () => number
  /** The counts by key, largest first. */
  readonly by: () => ReadonlyArray<readonly [string, number]>
}

/** A counter that counts only while `recording()` holds. */
export const makeOpsCounter = (recording: () => boolean, detail: string | undefined): OpsCounter => {
  const sourceOf = new WeakMap<object, string>()
  const counts = new Map<string, number>()
  let total = 0
  const bump = (key: string) => counts.set(key, (counts.get(key) ?? 0) + 1)
  return {
    context: <X>(primitive: unknown, fiber: unknown): X => {
      const p = primitive as Primitive
      if (recording()) {
        total++
        const id = String(p[IDENTIFIER] ?? p._tag ?? "?")
        bump(id)
        const span = (fiber as { readonly currentSpanLocal?: { readonly name: string } }).currentSpanLocal
        const name = span?.name ?? "(none)"
        bump(`span ${name}`)
        if (detail !== undefined && name === detail) {
          const fn = [p.payload, p[`${EFFECT}/successCont`], p[`${EFFECT}/args`]].find(
            (f): f is (...a: ReadonlyArray<unknown>) => unknown => typeof f === "function"
          )
          let text = fn === undefined ? "" : sourceOf.get(fn)
          if (fn !== undefined && text === undefined) {
            text = fn.toString().replace(/\s+/g, " ").slice(0, 90)
            sourceOf.set(fn, text)
          }
          bump(`in ${id} ${text}`)
        }
      }
      return p[EVALUATE](fiber) as X
    },
    total: () => total,
    by: () => [...counts].sort((a, b) => b[1] - a[1])
  }
}
