/**
 * What the service's operations share: state deltas split by scope and encoded as the
 * scripts take them, replies read back (hashes, stream entries, stream ids), and the
 * identifier checks the Python services make.
 */
import type { Event } from '@google/adk';

import { decodeEvent, encodeValue } from './codec.js';
import { CorruptDataError, InvalidInputError } from './errors.js';
import { Reply, pairs } from './scripts.js';

export const APP = 'app:';
export const USER = 'user:';
export const TEMP = 'temp:';
const MAX_ID_LENGTH = 1024;
/** A state delta split by scope, keys without their prefix, `temp:` keys dropped. */
export function split(delta: Record<string, unknown>): [string[], string[], string[]] {
  const scopes: [string[], string[], string[]] = [[], [], []];
  for (const [key, value] of Object.entries(delta)) {
    if (key.startsWith(TEMP)) continue;
    if (key.startsWith(APP)) scopes[2].push(key.slice(APP.length), encodeValue(key, value));
    else if (key.startsWith(USER)) scopes[1].push(key.slice(USER.length), encodeValue(key, value));
    else scopes[0].push(key, encodeValue(key, value));
  }
  return scopes;
}

/** UTF-8 bytes of the state fields and values a write stores. */
export function storedBytes(scopes: [string[], string[], string[]]): number {
  return scopes.flat().reduce((n, text) => n + Buffer.byteLength(text), 0);
}

export function stateArgv([session, user, app]: [string[], string[], string[]]): string[] {
  return [String(session.length / 2), String(user.length / 2), String(app.length / 2), ...session, ...user, ...app];
}

export function decodeHash(key: string, flat: Reply): Record<string, unknown> {
  const out: Record<string, unknown> = Object.create(null);
  for (const [field, value] of Object.entries(pairs(flat))) {
    try {
      out[field] = JSON.parse(value);
    } catch (exc) {
      throw new CorruptDataError(key, `field ${field} is not JSON: ${(exc as Error).message}`);
    }
  }
  return out;
}

export function merged(session: Record<string, unknown>, user: Record<string, unknown>, app: Record<string, unknown>) {
  const out: Record<string, unknown> = Object.create(null);
  Object.assign(out, session);
  for (const [k, v] of Object.entries(user)) out[USER + k] = v;
  for (const [k, v] of Object.entries(app)) out[APP + k] = v;
  return out;
}

export function checkId(name: string, value: unknown): string {
  if (typeof value !== 'string') throw new InvalidInputError(`${name} must be a string, got ${typeof value}`);
  if (!value || value !== value.trim()) {
    throw new InvalidInputError(`${name} must be non-empty without surrounding spaces: ${JSON.stringify(value)}`);
  }
  if ([...value].length > MAX_ID_LENGTH) throw new InvalidInputError(`${name} is longer than ${MAX_ID_LENGTH} characters`);
  if (!value.isWellFormed()) throw new InvalidInputError(`${name} has a lone surrogate: ${JSON.stringify(value)}`);
  return value;
}

export function streamId(id: string): [number, number] {
  const [ms, seq] = id.split('-');
  return [Number(ms), Number(seq ?? 0)];
}

export function after(a: string, b: string): boolean {
  const [am, as] = streamId(a);
  const [bm, bs] = streamId(b);
  return am > bm || (am === bm && as > bs);
}

export type Entry = [string, string[]];

export function entries(reply: Reply): Entry[] {
  return ((reply ?? []) as Reply[]).map((e) => {
    const [id, fields] = e as [string, string[]];
    return [String(id), (fields ?? []).map(String)];
  });
}

/** The stored events of stream entries (XRANGE replies), in the order given. */
export function storedEvents(key: string, list: Reply): Event[] {
  return entries(list).map(([id, fields]) => {
    const at = fields.indexOf('event');
    if (at < 0 || at % 2) throw new CorruptDataError(key, `entry ${id} has no 'event' field`);
    try {
      return decodeEvent(JSON.parse(fields[at + 1]) as Record<string, unknown>);
    } catch (exc) {
      throw new CorruptDataError(key, `an event is not valid event JSON: ${(exc as Error).message}`);
    }
  });
}
