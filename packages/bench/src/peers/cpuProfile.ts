/**
 * BENCH_OURS_CPUPROF=<file>: a V8 CPU profile of a bench's timed phase only, written to <file>
 * (.cpuprofile, for DevTools or a script). A diagnostic run, not to be measured.
 */
import { writeFileSync } from "node:fs"
import { Session } from "node:inspector/promises"

/** Starts sampling when `file` is set; the returned function stops and writes the profile. */
export const cpuProfiler = async (file: string | undefined): Promise<(() => Promise<void>) | undefined> => {
  if (file === undefined || file === "") return undefined
  const session = new Session()
  session.connect()
  await session.post("Profiler.enable")
  await session.post("Profiler.setSamplingInterval", { interval: 200 })
  await session.post("Profiler.start")
  return async () => {
    const { profile } = await session.post("Profiler.stop")
    writeFileSync(file, JSON.stringify(profile))
    session.disconnect()
  }
}
