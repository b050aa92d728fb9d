/**
 * The dashboard's pages, in navigation order. A new page is a module (`pages/*.ts`) exporting a
 * `PageModule` (its routes, queries and views, and its actions), added here.
 *
 * @since 0.1.0
 */
import type { PageModule } from "./Page.ts"
import { batches } from "./pages/Batches.ts"
import { deadLetters } from "./pages/DeadLetters.ts"
import { events } from "./pages/Events.ts"
import { flow } from "./pages/Flow.ts"
import { insights } from "./pages/Insights.ts"
import { overview } from "./pages/Overview.ts"
import { processes } from "./pages/Processes.ts"
import { queues } from "./pages/Queues.ts"
import { recurring } from "./pages/Recurring.ts"
import { workflows } from "./pages/Workflows.ts"

/** Every page module, in navigation order. */
export const pageModules: ReadonlyArray<PageModule> = [
  overview,
  queues,
  deadLetters,
  flow,
  recurring,
  processes,
  events,
  batches,
  workflows,
  insights
]
