// The benchmarks measure the library as its users run it: the compiled package (`npm run build`,
// tsc's output in dist/), not the sources transpiled on the fly by tsx (whose esbuild keeps
// function names with a call per closure created: W3 ran 6-8% slower that way). Registered with
// `--import`, this resolve hook sends every import of a file under the repository's src/ to its
// compiled twin in dist/, so the whole process (the bench's own imports included) holds one
// copy of each module. BENCH_FROM_SOURCE=1 runs the sources instead.
import { existsSync } from "node:fs"
import { register } from "node:module"
import { fileURLToPath, pathToFileURL } from "node:url"

const root = fileURLToPath(new URL("../../../", import.meta.url))
const src = pathToFileURL(`${root}src/`).href
const dist = pathToFileURL(`${root}dist/`).href

if (process.env.BENCH_FROM_SOURCE !== "1") {
  if (!existsSync(`${root}dist/index.js`)) {
    console.error("bench: dist/ is missing; run `npm run build` first (or BENCH_FROM_SOURCE=1 for the sources)")
    process.exit(1)
  }
  register(
    `data:text/javascript,${encodeURIComponent(`
      const src = ${JSON.stringify(src)}
      const dist = ${JSON.stringify(dist)}
      export async function resolve(specifier, context, next) {
        const resolved = await next(specifier, context)
        if (resolved.url.startsWith(src) && resolved.url.endsWith(".ts"))
          return { ...resolved, url: dist + resolved.url.slice(src.length, -3) + ".js", format: "module" }
        return resolved
      }`)}`
  )
}
