import { defineConfig } from "vitest/config"

export default defineConfig({
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
