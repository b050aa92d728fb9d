/**
 * The raw SQL floor, as the team's peer harness defines it (shared/bench/peers/src/raw.ts): the
 * cheapest reasonable job lifecycle on this PostgreSQL from Node with postgres.js. A minimal
 * jobs table, the bulk insert in one statement, claims with
 * `UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n) RETURNING`, one batched
 * DELETE of each claim's ids. No retries, no leases, no archive, no NOTIFY on W1: the figure a
 * job library is measured against ("W1 tuned ≥ 0.75× the raw SQL floor", issue 24).
 * W3's floor, the same harness's: a run row claimed with SKIP LOCKED, one checkpoint INSERT per
 * step (three commits), one UPDATE to complete; a start is INSERT + pg_notify.
 *   tsx packages/bench/src/peers/raw.ts w1 [--variant c10-b100] [--run N]
 *   tsx packages/bench/src/peers/raw.ts w2 [--variant c10-b1] [--run N]
 *   tsx packages/bench/src/peers/raw.ts w3 [--run N]
 * W2's floor, the same harness's: LISTEN on a channel, the producer's INSERT and pg_notify in one
 * statement, loops claiming one job each (1-s fallback poll): the pickup latency PostgreSQL and a
 * Node driver give on this machine, below which no library's W2 p50 can go without skipping the
 * database.
 * W1 variant `c<loops>-b<batch>`: that many claim loops, each claiming up to that many jobs (the
 * harness's reference floor is c10-b100).
 */
import { runW3, W3_RUNS } from "../workflows.ts"
import {
  CONCURRENCY,
  databaseName,
  emit,
  finishRun,
  guard,
  load,
  makeLatencyRecorder,
  measure,
  POOL_MAX,
  parseArgs,
  pkgVersion,
  resetDatabase,
  round2,
  runLatency,
  sleep,
  timeProcessing,
  urlFor,
  W1_JOBS
} from "./common.ts"

interface Job {
  readonly id: string
  readonly payload: unknown
}

/** The part of postgres.js this file uses. */
interface Sql {
  <T>(strings: TemplateStringsArray, ...values: ReadonlyArray<unknown>): Promise<Array<T>>
  unsafe(query: string): Promise<unknown>
  listen(channel: string, onNotify: () => void): Promise<unknown>
  json(value: unknown): unknown
  end(options: { timeout: number }): Promise<void>
}

const { default: postgres } = await load<{ default: (url: string, options: Record<string, unknown>) => Sql }>(
  "postgres"
)

const args = parseArgs()
guard()
const DB = databaseName(args.workload === "w3" ? "wf_raw" : "raw")
const variant = args.workload === "w3" ? "3-step" : args.variant === "default" ? "c10-b100" : args.variant
const shape = /^c(\d+)-b(\d+)$/.exec(variant)
if (shape === null && args.workload !== "w3") throw new Error(`raw: variant must be c<loops>-b<batch>, got ${variant}`)
const LOOPS = Number(shape?.[1] ?? CONCURRENCY)
const BATCH = Number(shape?.[2] ?? 100)

await resetDatabase(DB)
const sql = postgres(urlFor(DB), { max: POOL_MAX, onnotice: () => {}, idle_timeout: 0 })
await sql.unsafe(`
  create table jobs (
    id bigint generated always as identity primary key,
    queue text not null,
    payload jsonb not null,
    run_at timestamptz not null default now(),
    locked_at timestamptz,
    attempts int not null default 0
  );
  create index jobs_ready on jobs (queue, run_at, id) where locked_at is null;
  create table wf_runs (
    id bigint generated always as identity primary key,
    status text not null default 'pending',
    input jsonb not null,
    output jsonb,
    locked_at timestamptz,
    created_at timestamptz not null default now(),
    completed_at timestamptz
  );
  create index wf_runs_ready on wf_runs (id) where status = 'pending';
  create table wf_steps (
    run_id bigint not null,
    step int not null,
    output jsonb,
    primary key (run_id, step)
  );
`)

const claim = (queue: string, n: number) => sql<Job>`
  update jobs set locked_at = now(), attempts = attempts + 1
  where id in (
    select id from jobs
    where queue = ${queue} and locked_at is null and run_at <= now()
    order by run_at, id
    limit ${n}
    for update skip locked
  )
  returning id, payload`

const noop = async (): Promise<void> => {
  handled++
}
let handled = 0

const complete = (ids: ReadonlyArray<string>) => sql`delete from jobs where id = any(${ids}::bigint[])`

/** Wakes idle run loops on NOTIFY (or after a 1-s poll); no lost wake-ups. */
const makeWaker = () => {
  const waiters: Array<() => void> = []
  let pending = 0
  return {
    notify: () => {
      const waiter = waiters.shift()
      if (waiter) waiter()
      else pending++
    },
    wait: (ms: number): Promise<void> => {
      if (pending > 0) {
        pending--
        return Promise.resolve()
      }
      return new Promise((resolve) => {
        const fire = () => {
          clearTimeout(timer)
          resolve()
        }
        const timer = setTimeout(() => {
          const i = waiters.indexOf(fire)
          if (i >= 0) waiters.splice(i, 1)
          resolve()
        }, ms)
        waiters.push(fire)
      })
    }
  }
}

/** W2 on raw SQL: LOOPS claim loops of BATCH jobs, woken by NOTIFY (1-s fallback poll); its latency summary. */
const rawW2 = async () => {
  const rec = makeLatencyRecorder()
  const waker = makeWaker()
  await sql.listen("jobs_new", () => waker.notify())
  let stopping = false
  const loops = Promise.all(
    Array.from({ length: LOOPS }, async () => {
      while (!stopping) {
        const jobs = await claim("w2", BATCH)
        if (jobs.length === 0) {
          await waker.wait(1000)
          continue
        }
        for (const j of jobs) {
          const p = j.payload as { t: number; w: boolean }
          rec.record(p.t, p.w)
        }
        await complete(jobs.map((j) => j.id))
      }
    })
  )
  await sleep(500)
  const result = await runLatency({
    rec,
    send: (p) =>
      sql`with j as (insert into jobs (queue, payload) values ('w2', ${sql.json(p)}) returning id)
          select pg_notify('jobs_new', '') from j`
  })
  stopping = true
  for (let i = 0; i < LOOPS; i++) waker.notify()
  await loops
  return result
}

/** W3 on raw SQL: CONCURRENCY run loops, each run three checkpoint commits and a completion. */
const rawW3 = async () => {
  const waker = makeWaker()
  await sql.listen("wf_new", () => waker.notify())
  let completed = 0
  let stopping = false
  const claimRun = () => sql<{ id: string; input: { i: number } }>`
    update wf_runs set status = 'running', locked_at = now()
    where id = (select id from wf_runs where status = 'pending' order by id limit 1 for update skip locked)
    returning id, input`
  const loops = Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (!stopping) {
        const [run] = await claimRun()
        if (run === undefined) {
          await waker.wait(1000)
          continue
        }
        let acc = run.input.i
        for (let step = 1; step <= 3; step++) {
          acc = acc + 1
          await sql`insert into wf_steps (run_id, step, output) values (${run.id}, ${step}, ${sql.json({ acc })})`
        }
        await sql`update wf_runs set status = 'completed', output = ${sql.json({ acc })}, completed_at = now() where id = ${run.id}`
        completed++
      }
    })
  )
  const result = await runW3({
    start: (i) =>
      sql`with r as (insert into wf_runs (input) values (${sql.json({ i })}) returning id) select pg_notify('wf_new', '') from r`,
    finished: () => completed,
    pollMs: 2
  })
  stopping = true
  for (let i = 0; i < CONCURRENCY; i++) waker.notify()
  await loops
  return result
}

const base = {
  library: "raw-sql",
  version: `postgres.js ${pkgVersion("postgres")}`,
  workload: args.workload,
  variant
}

try {
  if (args.workload === "w1") {
    const payloads = Array.from({ length: W1_JOBS }, (_, i) => ({ i }))
    const enq = await measure(
      () => sql`insert into jobs (queue, payload) select 'w1', x from jsonb_array_elements(${sql.json(payloads)}) x`
    )
    await sql`analyze jobs`
    let stopping = false
    let loops: Promise<Array<void>> = Promise.resolve([])
    const proc = await timeProcessing({
      total: W1_JOBS,
      handled: () => handled,
      database: DB,
      start: async () => {
        loops = Promise.all(
          Array.from({ length: LOOPS }, async () => {
            while (!stopping) {
              const jobs = await claim("w1", BATCH)
              if (jobs.length === 0) {
                await sleep(50)
                continue
              }
              // the harness's no-op handler: one await per job
              for (const _job of jobs) await noop()
              await complete(jobs.map((j) => j.id))
            }
          })
        )
      },
      remaining: async () => (await sql<{ n: number }>`select count(*)::int as n from jobs`)[0]?.n ?? -1
    })
    stopping = true
    await loops
    emit({
      ...base,
      config: { loops: LOOPS, batch: BATCH, poolMax: POOL_MAX, completion: "DELETE ... WHERE id = any($ids)" },
      result: {
        enqueueBulkPerSec: Math.round((W1_JOBS / enq.m.wallMs) * 1000),
        enqueueBulkMs: Math.round(enq.m.wallMs),
        enqueuePgCpuS: round2(enq.m.pgCpuS),
        ...proc
      }
    })
  } else if (args.workload === "w2") {
    emit({
      ...base,
      config: { loops: LOOPS, batch: BATCH, poolMax: POOL_MAX, listenNotify: true, fallbackPollMs: 1000 },
      result: await rawW2()
    })
  } else if (args.workload === "w3") {
    emit({
      ...base,
      config: {
        workers: CONCURRENCY,
        starters: CONCURRENCY,
        commitsPerRun: "start 1 + claim 1 + 3 checkpoints + complete 1"
      },
      result: { ...(await rawW3()), expectedRuns: W3_RUNS }
    })
  } else {
    console.error(`raw: unknown workload ${args.workload} (w1, w2 or w3)`)
    process.exitCode = 2
  }
} finally {
  await sql.end({ timeout: 5 })
  await finishRun(DB)
}
process.exit(process.exitCode ?? 0)
