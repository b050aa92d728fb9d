/**
 * Debian's Chromium driven by playwright-core (a dev dependency; it downloads no browser).
 * `.ci/run` installs `chromium` when it is missing; a machine without it fails these tests with
 * the command that installs it.
 */
import { existsSync } from "node:fs"
import { Effect } from "effect"
import { type Browser, chromium } from "playwright-core"

export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium"

/** Chromium for the scope (root needs --no-sandbox; containers have a small /dev/shm). */
export const launchBrowser: Effect.Effect<Browser, never, import("effect").Scope.Scope> = Effect.acquireRelease(
  Effect.suspend(() =>
    existsSync(CHROMIUM)
      ? Effect.promise(() =>
          chromium.launch({
            executablePath: CHROMIUM,
            args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]
          })
        )
      : Effect.die(new Error(`${CHROMIUM} is missing: apt-get install -y --no-install-recommends chromium`))
  ),
  (browser) => Effect.promise(() => browser.close())
)
