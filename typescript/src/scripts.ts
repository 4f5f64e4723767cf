/**
 * The Lua scripts, assembled exactly as the Python package assembles them
 * (`_redis/scripts.py`, `lua_source`): a shebang line stays first, then the libraries the
 * script's `-- uses:` line names, in that order, then the script itself.
 *
 * The `.lua` files are a byte-for-byte copy of `src/redis_agent_sessions/_redis/lua/`,
 * made by the build (`scripts/sync-lua.mjs`) into this package's `lua/` folder, which it
 * ships; a test in each suite fails when the copy differs from the Python package's files.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import {
  CorruptDataError,
  PermissionDeniedError,
  RedisSessionsError,
  StoreFullError,
} from './errors.js';

/** The Lua libraries a script may name on its `-- uses:` line, in the order prepended. */
export const LIBRARIES = [
  '_permitted',
  '_layout',
  '_expiry',
  '_postings',
  '_counts',
  '_scoring',
  '_rank',
  '_entries',
];

/** The scripts this package runs (and the libraries they use are copied beside them). */
export const SCRIPT_NAMES = [
  'append_event',
  'app_apply',
  'app_pending',
  'create_session',
  'delete_session',
  'read_session',
  'register_app',
] as const;
export type ScriptName = (typeof SCRIPT_NAMES)[number];

/** The folder holding the `.lua` copies: `<package>/lua`, from `dist/src/` or `src/`. */
export function luaDir(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  const up = here.endsWith(join('dist', 'src')) ? join(here, '..', '..') : join(here, '..');
  return join(up, 'lua');
}

/** The libraries a script's opening comment declares (`-- uses: a, b`), in order. */
export function uses(source: string): string[] {
  for (const line of source.split('\n')) {
    if (!line.startsWith('--') && !line.startsWith('#!')) break;
    if (line.startsWith('-- uses:')) {
      const named = line
        .slice('-- uses:'.length)
        .split(',')
        .map((p) => p.trim());
      const unknown = named.filter((n) => !LIBRARIES.includes(n));
      if (unknown.length) throw new RedisSessionsError(`unknown Lua libraries ${unknown}`);
      return named;
    }
  }
  return [];
}

/** The text Redis runs for `lua/<name>.lua` (Python's `lua_source`). */
export function luaSource(name: string, dir = luaDir()): string {
  let own = readFileSync(join(dir, `${name}.lua`), 'utf-8');
  let first = '';
  if (own.startsWith('#!')) {
    const at = own.indexOf('\n');
    first = own.slice(0, at + 1);
    own = own.slice(at + 1);
  }
  const libs = uses(own).map((p) => readFileSync(join(dir, `${p}.lua`), 'utf-8'));
  return first + libs.join('') + own;
}

export type Reply = null | number | string | Reply[];

/** What runs commands: one node, or a cluster (routed by the first key). */
export interface Connection {
  send(firstKey: string | undefined, args: string[], readonly?: boolean): Promise<unknown>;
}

export class Script {
  readonly source: string;
  readonly sha: string;

  constructor(readonly name: ScriptName) {
    this.source = luaSource(name);
    this.sha = createHash('sha1').update(this.source).digest('hex');
  }

  /** Run with `keys` and `args`: the reply, with the statuses every script shares raised. */
  async run(conn: Connection, keys: string[], args: (string | number)[]): Promise<Reply> {
    const tail = [String(keys.length), ...keys, ...args.map(String)];
    let reply: unknown;
    try {
      try {
        reply = await conn.send(keys[0], ['EVALSHA', this.sha, ...tail]);
      } catch (exc) {
        if (!String((exc as Error).message).startsWith('NOSCRIPT')) throw exc;
        // EVAL loads it into the node's script cache too: the next EVALSHA finds it.
        reply = await conn.send(keys[0], ['EVAL', this.source, ...tail]);
      }
    } catch (exc) {
      throw refusal(exc as Error, keys[0]);
    }
    return checked(reply as Reply);
  }
}

const WRONG_TYPE = -3;
const DENIED = -4;
const FULL = -6;

function refusal(exc: Error, key: string | undefined): Error {
  const message = String(exc.message);
  if (message.startsWith('NOPERM')) return new PermissionDeniedError('evalsha', key ?? null, message);
  if (message.startsWith('OOM')) return new StoreFullError(message);
  return exc;
}

/** A script's reply, or the refusals every script shares raised (Python's `checked`). */
export function checked(reply: Reply): Reply {
  if (Array.isArray(reply) && reply.length && typeof reply[0] === 'number') {
    const [status] = reply;
    if (status === DENIED) throw new PermissionDeniedError(String(reply[1]), String(reply[2]), 'nothing was written');
    if (status === WRONG_TYPE) throw new CorruptDataError(String(reply[1]), `expected another type, found ${reply[2]}`);
    if (status === FULL) throw new StoreFullError(String(reply[1]));
  }
  return reply;
}

/** A flat field/value reply as an object. */
export function pairs(flat: Reply): Record<string, string> {
  const out: Record<string, string> = Object.create(null);
  const list = (flat ?? []) as Reply[];
  for (let i = 0; i + 1 < list.length; i += 2) out[String(list[i])] = String(list[i + 1]);
  return out;
}
