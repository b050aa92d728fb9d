#!/usr/bin/env node
// The `pgbus` executable of the package's `bin` field: runs the compiled CLI (dist/, built by
// `npm run build`, which `npm pack` runs) on plain Node.
const [major, minor] = process.versions.node.split(".").map(Number)
if (major < 22 || (major === 22 && minor < 19)) {
  process.stderr.write(`pgbus: Node.js >= 22.19 is required (this is ${process.version})\n`)
  process.exit(1)
}
const entry = new URL("../dist/bin/pgbus.js", import.meta.url)
try {
  await import(entry.href)
} catch (error) {
  if (error?.code === "ERR_MODULE_NOT_FOUND" && String(error.message).includes(entry.pathname)) {
    process.stderr.write("pgbus: dist/ is missing: run `npm run build` (or use `npm run pgbus -- ...` in a checkout)\n")
    process.exit(1)
  }
  throw error
}
