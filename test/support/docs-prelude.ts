/**
 * What the docs' fragments take from the app around them (its services, its values, the jobs a
 * page defined in an earlier block), declared for `test/docs.test.ts`, which copies this file
 * beside the blocks it checks. Types are the ones the fragments need, nothing looser.
 */
import type { Effect, Layer, Option, Schema } from "effect"
import type { HttpServerRequest } from "effect/http"
import type { SqlClient } from "effect/sql"
import type { Batch, Job, QueueStore } from "effect-pgbus"
import type { Event } from "../../src/EventBus/Envelope.ts"
import type { Subscriber } from "../../src/EventBus/Subscription.ts"
import type { RunHandle } from "../../src/Workflow/Client.ts"

type Request = HttpServerRequest.HttpServerRequest
type AJob<Name extends string, P> = Job.Job<Name, P, unknown, never, never>
type User = {
  readonly id: string
  readonly name: string
  readonly email: string
}

declare global {
  // the app's database and request values
  const sql: SqlClient.SqlClient
  const user: User
  const users: ReadonlyArray<User>
  const order: { readonly id: string; readonly total: number; readonly accountId: string }
  const orderId: string
  const invoiceId: string
  const accountId: string
  const connectionId: string
  const id: string
  const tenant: { readonly id: string }
  const requestId: string
  const webhookId: string
  const params: { readonly customerId: string; readonly total: number }
  const rows: ReadonlyArray<{ readonly id: string; readonly data: string }>
  const event: { readonly id: string }
  const queues: QueueStore["Service"]
  const program: Effect.Effect<void>
  const run: RunHandle
  const jobs: ReadonlyArray<AJob<"Cleanup", {}>>
  // the jobs docs/recurring.md defined in its first block
  const Cleanup: AJob<"Cleanup", { readonly batchSize: number }>
  const DailyReport: AJob<"DailyReport", {}>

  // the app's services
  const Stock: { readonly reserve: (orderId: string) => Effect.Effect<void> }
  const Warehouse: { readonly reserve: (orderId: string) => Effect.Effect<void> }
  const Users: { readonly importOne: (id: string) => Effect.Effect<void> }
  const Mailer: {
    readonly welcome: (userId: string) => Effect.Effect<void>
    readonly importDone: (initiatedBy: string, completed: number, failed: number) => Effect.Effect<void>
  }
  const MailerLive: Layer.Layer<never>
  const AuditLog: { readonly record: (event: Event<unknown>) => Effect.Effect<void> }
  const Orders: {
    readonly insert: (params: {
      readonly customerId: string
      readonly total: number
    }) => Effect.Effect<{ readonly id: string }>
    readonly markShipped: (orderId: string) => Effect.Effect<void>
    readonly isShipped: (orderId: string) => Effect.Effect<boolean>
    readonly import: (orderId: string) => Effect.Effect<void>
  }
  const Crm: { readonly sync: (accountId: string) => Effect.Effect<void> }
  const Partner: { readonly call: (accountId: string) => Effect.Effect<void> }
  const Search: { readonly reindex: (docId: string, rev: number) => Effect.Effect<void> }
  const Ledger: {
    readonly apply: (entry: { readonly accountId: string; readonly amount: number }) => Effect.Effect<void>
  }
  const Gateway: { readonly isDown: Effect.Effect<boolean>; readonly charge: (orderId: string) => Effect.Effect<void> }
  const Pricing: { readonly quote: (sku: string) => Effect.Effect<{ readonly price: number }> }
  const Accounts: {
    readonly isClosed: (userId: string) => Effect.Effect<boolean>
    readonly activate: (userId: string, chargeId: string) => Effect.Effect<void>
  }
  const Payments: {
    readonly charge: (
      userId: string,
      options: { readonly idempotencyKey: string }
    ) => Effect.Effect<{ readonly id: string }>
    readonly capture: (orderId: string, amount: number) => Effect.Effect<{ readonly captured: number }>
  }
  const Charge: Schema.Struct<{ readonly id: Schema.String }>
  const Exports: { readonly status: (id: string) => Effect.Effect<{ readonly ready: boolean; readonly url: string }> }
  const Session: {
    readonly of: (
      request: Request
    ) => Effect.Effect<{ readonly email: string; readonly admin: boolean; readonly tenantId: string }>
  }
  const Sessions: { readonly userOf: (request: Request) => Effect.Effect<User | undefined> }
  const Rooms: { readonly isMember: (user: User, stream: string) => Effect.Effect<boolean> }
  const AppRoutes: Layer.Layer<never>
  const MyRoutes: Layer.Layer<never>
  const readRows: (file: string) => Effect.Effect<ReadonlyArray<{ readonly row: string }>>
  const recordShipment: Effect.Effect<void>
  const html: (strings: TemplateStringsArray, ...values: ReadonlyArray<unknown>) => string
  const raw: (html: string) => string
  const authorize: (request: Request) => Effect.Effect<{ readonly actor: string; readonly role: "read" | "write" }>
  const resolveContext: (request: Request) => Effect.Effect<{ readonly resourceId?: string }>

  // jobs a page defined in an earlier block
  const SendWelcome: AJob<"SendWelcome", { readonly userId: string }>
  const SyncInvoice: AJob<"SyncInvoice", { readonly invoice: number }>
  const SendReceipt: AJob<"SendReceipt", { readonly orderId: string }>
  const Signup: Subscriber<unknown, void, never, never>
  const PickLine: AJob<"PickLine", { readonly line: string }>
  const ImportRow: AJob<"ImportRow", { readonly row: { readonly id: string; readonly data: string } }>
  const Transform: AJob<"Transform", { readonly row: string }>
  const Audit: AJob<"Audit", { readonly file: string }>
  const ImportSucceeded: AJob<"ImportSucceeded", Batch.Finished>
  const ImportFailed: AJob<"ImportFailed", Batch.Finished>
}

export type { Option }
