import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"

const source = (path: string) => fileURLToPath(new URL(path, import.meta.url))

/**
 * Test files that build and run whole programs of their own (the packed package installed and
 * compiled, PostgreSQL clusters initialised, the docs' blocks typechecked): they run after the
 * others, so that their CPU does not compete with the timing of the suite's concurrent tests on
 * a small machine.
 */
const standalone = ["test/package.test.ts", "test/embedded.test.ts", "test/tls.test.ts", "test/docs.test.ts"]

export default defineConfig({
  // the package's own name resolves to its sources, as tsconfig.json's `paths` say (the
  // published exports point at dist/, which the tests do not build)
  resolve: {
    alias: [
      { find: /^effect-pgbus$/, replacement: source("./src/index.ts") },
      { find: /^effect-pgbus\/embedded$/, replacement: source("./src/Embedded/index.ts") },
      { find: /^effect-pgbus\/testing$/, replacement: source("./src/Testing/index.ts") }
    ]
  },
  test: {
    globalSetup: ["./test/support/globalSetup.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // test files run in parallel, each on its own cloned database
    fileParallelism: true,
    maxWorkers: 4,
    projects: [
      {
        extends: true,
        test: {
          name: "suite",
          include: ["test/**/*.test.ts", "packages/*/test/**/*.test.ts"],
          exclude: standalone,
          sequence: { groupOrder: 0 }
        }
      },
      { extends: true, test: { name: "standalone", include: standalone, sequence: { groupOrder: 1 } } }
    ]
  }
})
