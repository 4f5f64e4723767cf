/**
 * Redis key names, built exactly as the Python package's `keys.py` builds them: the
 * layout is an interface both languages share (docs/redis-layout.md).
 */

// Percent-encoded, by code point: '%', ':', '{', '}', space, DEL, C0 and C1 controls.
function mustEscape(code: number): boolean {
  return (
    code === 0x25 ||
    code === 0x3a ||
    code === 0x7b ||
    code === 0x7d ||
    code === 0x20 ||
    code === 0x7f ||
    code < 0x20 ||
    (code >= 0x80 && code < 0xa0)
  );
}

/** An identifier as it appears in a key: no input can forge a hash tag or a separator. */
export function escape(identifier: string): string {
  let out = '';
  for (const ch of identifier) {
    const code = ch.codePointAt(0)!;
    out += mustEscape(code) ? `%${code.toString(16).toUpperCase().padStart(2, '0')}` : ch;
  }
  return out;
}

/** Inverse of {@link escape}. */
export function unescape(part: string): string {
  return part.replace(/%([0-9A-F]{2})/g, (_m, hex: string) => String.fromCodePoint(parseInt(hex, 16)));
}

/** Every key one session's operations touch (Python's `SessionKeys`). */
export interface SessionKeys {
  meta: string;
  state: string;
  events: string;
  eventIds: string;
  compactions: string;
  userState: string;
  userSessions: string;
  userUpdated: string;
  appState: string;
  appSessions: string;
  appUpdated: string;
  appExpiry: string;
  /** The session's member in the app-wide index: `<user>:<session>`, escaped. */
  appMember: string;
  /** The user's field in the app's applied-outbox hash (cluster layout). */
  userMember: string;
  appOutbox: string;
  appVersions: string;
  appApplied: string;
  appPending: string;
}

const LAYOUT_WORDS = ['apps', 'mem', 'demo'];

export class KeySpace {
  constructor(readonly prefix = 'ras') {
    if (!prefix || prefix.includes('{') || prefix.includes('}')) {
      throw new Error(`key prefix must be non-empty and contain no '{' or '}': ${prefix}`);
    }
    const clash = prefix.split(':').slice(1).find((p) => LAYOUT_WORDS.includes(p));
    if (clash !== undefined) {
      throw new Error(`key prefix ${prefix} has ${clash} after a ':'`);
    }
  }

  app(appName: string): string {
    return `${this.prefix}:{${escape(appName)}}`;
  }

  user(appName: string, userId: string): string {
    return `${this.prefix}:{${escape(appName)}:${escape(userId)}}`;
  }

  /** The layout version the store is written in (docs/layout-spec.md). */
  layout(): string {
    return `${this.prefix}:layout`;
  }

  apps(): string {
    return `${this.prefix}:apps`;
  }

  session(appName: string, userId: string, sessionId: string): SessionKeys {
    const app = this.app(appName);
    const user = this.user(appName, userId);
    const meta = `${user}:session:${escape(sessionId)}`;
    return {
      meta,
      state: `${meta}:state`,
      events: `${meta}:events`,
      eventIds: `${meta}:event_ids`,
      compactions: `${meta}:compactions`,
      userState: `${user}:user_state`,
      userSessions: `${user}:sessions`,
      userUpdated: `${user}:sessions_updated`,
      appState: `${app}:app_state`,
      appSessions: `${app}:sessions`,
      appUpdated: `${app}:sessions_updated`,
      appExpiry: `${app}:sessions_expiry`,
      appMember: `${escape(userId)}:${escape(sessionId)}`,
      userMember: escape(userId),
      appOutbox: `${user}:app_outbox`,
      appVersions: `${app}:app_versions`,
      appApplied: `${app}:app_applied`,
      appPending: `${app}:app_pending`,
    };
  }
}

/** Inverse of a session's app member: [user id, session id]. */
export function splitAppMember(member: string): [string, string] {
  const at = member.indexOf(':');
  return [unescape(member.slice(0, at)), unescape(member.slice(at + 1))];
}
