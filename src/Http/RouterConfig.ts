/**
 * Router settings the API's and the dashboard's paths need.
 *
 * @since 0.1.0
 */
import type { FindMyWay } from "effect/http"

/**
 * A recurring task's key (up to 128 characters, more once URL-encoded) is a path parameter, past
 * the router's default cap of 100. Pass these where the app serves its router:
 * `HttpRouter.serve(app, { routerConfig: Http.routerConfig })`.
 */
export const routerConfig: Partial<FindMyWay.RouterConfig> = { maxParamLength: 512 }
