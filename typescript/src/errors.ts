/**
 * The errors the service raises: the same classes, by name and meaning, as the Python
 * package's `redis_agent_sessions.errors`, so that a worker in either language can tell
 * a stale write from a missing session the same way.
 */

export class RedisSessionsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** Bad input, refused before anything was written. */
export class InvalidInputError extends RedisSessionsError {}

/** An encoded event or state exceeds the service's `maxPayloadBytes`; nothing was written. */
export class PayloadTooLargeError extends InvalidInputError {
  constructor(
    what: string,
    readonly size: number,
    readonly limit: number,
  ) {
    super(`${what} is ${size} bytes encoded, over the limit of ${limit} bytes`);
  }
}

/** A session with that id exists already (createSession). */
export class AlreadyExistsError extends RedisSessionsError {}

/** The session does not exist (never created, deleted, or expired). */
export class SessionNotFoundError extends RedisSessionsError {}

export const STALE_SESSION_MESSAGE =
  'The session was changed by another writer after this copy was read: ' +
  'read it again (getSession) and retry.';

/** Another writer appended to the session after this copy was read; nothing was written. */
export class StaleSessionError extends RedisSessionsError {
  constructor(message: string = STALE_SESSION_MESSAGE) {
    super(message);
  }
}

/** A key holds something the layout never writes there. */
export class CorruptDataError extends RedisSessionsError {
  constructor(
    readonly key: string,
    readonly detail: string,
  ) {
    super(`corrupt data at ${key}: ${detail}`);
  }
}

/** The session's keys were evicted apart: its metadata remains, `missing` does not. */
export class IncompleteSessionError extends RedisSessionsError {
  constructor(
    readonly appName: string,
    readonly userId: string,
    readonly sessionId: string,
    readonly missing: string[],
    readonly key: string,
  ) {
    super(
      `session ${sessionId} of ${appName}/${userId} is incomplete: ${missing.join(', ')} ` +
        `missing (${key})`,
    );
  }
}

/** The Redis user may not run a command the operation needs; nothing was written. */
export class PermissionDeniedError extends RedisSessionsError {
  constructor(
    readonly command: string | null,
    readonly key: string | null,
    detail = '',
  ) {
    super(`permission denied: ${command ?? '?'} on ${key ?? '?'}${detail ? ` (${detail})` : ''}`);
  }
}

/** Redis refused the write for memory (maxmemory); nothing was written. */
export class StoreFullError extends RedisSessionsError {}

/**
 * The store records a Redis layout newer than this package reads (`<prefix>:layout`):
 * workers of a newer release, or of another language, wrote it. Raised at a service's
 * first operation, before it reads or writes anything else.
 */
export class LayoutVersionError extends RedisSessionsError {
  constructor(
    readonly key: string,
    readonly found: string,
    readonly supported: number,
  ) {
    super(
      `the store records layout ${found} (${key}), but this version of redis-agent-sessions ` +
        `reads layout ${supported} and older: nothing was read or written. Upgrade the ` +
        'workers to a release that reads it (docs/layout-spec.md)',
    );
  }
}
