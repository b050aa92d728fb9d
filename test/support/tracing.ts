/**
 * A tracing backend that records the text of every SQL statement whose span ends under it. Any
 * tracer makes the library open the spans it skips without one, so the texts are every
 * statement's (BEGIN and COMMIT have no span).
 */
import { Tracer } from "effect"

/** The tracer, and the statement texts it has seen so far (in the order their spans ended). */
export const statementTracer = () => {
  const texts: Array<string> = []
  const tracer = Tracer.make({
    span: (options) =>
      new (class extends Tracer.NativeSpan {
        override end(endTime: bigint, exit: Parameters<Tracer.NativeSpan["end"]>[1]): void {
          const text = this.attributes.get("db.query.text")
          if (typeof text === "string") texts.push(text)
          super.end(endTime, exit)
        }
      })(options)
  })
  return { tracer, texts }
}
