import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"

const source = (path: string) => fileURLToPath(new URL(path, import.meta.url))

export default defineConfig({
  // the package's own name resolves to its sources, as tsconfig.json's `paths` say (the
  // published exports point at dist/, which the tests do not build)
  resolve: {
    alias: [
      { find: /^effect-pgbus$/, replacement: source("./src/index.ts") },
      { find: /^effect-pgbus\/embedded$/, replacement: source("./src/Embedded/index.ts") }
    ]
  },
  test: {
    include: ["test/**/*.test.ts", "packages/*/test/**/*.test.ts"],
    globalSetup: ["./test/support/globalSetup.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // test files run in parallel, each on its own cloned database
    fileParallelism: true,
    maxWorkers: 4
  }
})
