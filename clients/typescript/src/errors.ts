// The errors of the client: what it throws.

import type { Code } from "./generated.js";

/** Anything this client throws. */
export class TtwError extends Error {}

/** No answer from the service after every retry (refused, reset, timed out). */
export class ConnectionFailed extends TtwError {}

/** The service refused: its HTTP status, its stable code and a message. */
export class ApiError extends TtwError {
  constructor(
    readonly status: number,
    readonly code: Code | string,
    message: string,
  ) {
    super(`${status} ${code}: ${message}`);
  }

  /** Whether the service answered with `code`. */
  is(code: Code): boolean {
    return this.code === code;
  }
}
