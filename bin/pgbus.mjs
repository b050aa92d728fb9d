#!/usr/bin/env node
// The `pgbus` executable of the package's `bin` field: loads the TypeScript entry through tsx.
const [major, minor] = process.versions.node.split(".").map(Number)
if (major < 22 || (major === 22 && minor < 19)) {
  process.stderr.write(`pgbus: Node.js >= 22.19 is required (this is ${process.version})\n`)
  process.exit(1)
}
const { register } = await import("tsx/esm/api")
register()
await import(new URL("../src/bin/pgbus.ts", import.meta.url).href)
