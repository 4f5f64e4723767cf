/**
 * ADK-JS events <-> the layout's canonical event JSON.
 *
 * The Python package stores an event as ADK Python's pydantic model dumps it: snake_case
 * names, `None` fields left out, times in epoch seconds (float). ADK-JS events are
 * camelCase with times in epoch milliseconds. Names are converted both ways except inside
 * values that hold the application's own keys (state deltas, tool arguments and results,
 * custom metadata, workflow output), which are kept as they are, as ADK-JS's own
 * `transformToSnakeCaseEvent` keeps them.
 */
import type { Event } from '@google/adk';

import { InvalidInputError } from './errors.js';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

// Paths (in the stored, snake_case names) whose value is the application's own data.
const OPAQUE = new Set([
  'actions.state_delta',
  'actions.artifact_delta',
  'actions.agent_state',
  'actions.route',
  'custom_metadata',
  'content.parts.function_call.args',
  'content.parts.function_call.partial_args',
  'content.parts.function_response.response',
  'output',
]);
// Paths whose keys are ids (function call ids) but whose values are models: keys kept,
// values converted.
const KEYED = new Set(['actions.requested_auth_configs', 'actions.requested_tool_confirmations']);

// What ADK Python's EventActions holds (it refuses any other field when it reads an event).
const PY_ACTIONS = new Set([
  'agent_state',
  'artifact_delta',
  'compaction',
  'end_of_agent',
  'escalate',
  'render_ui_widgets',
  'requested_auth_configs',
  'requested_tool_confirmations',
  'rewind_before_invocation_id',
  'route',
  'set_model_response',
  'skip_summarization',
  'state_delta',
  'transfer_reason',
  'transfer_to_agent',
]);

const toSnake = (key: string): string => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
const toCamel = (key: string): string => key.replace(/_([a-z0-9])/g, (_m, c: string) => c.toUpperCase());

function convert(value: unknown, names: (k: string) => string, path: string, stored: (k: string) => string): Json | undefined {
  if (value === undefined || value === null) return undefined; // left out, as Python's exclude_none
  if (Array.isArray(value)) {
    return value.map((v) => convert(v, names, path, stored) ?? null);
  }
  if (typeof value === 'object') {
    if (value instanceof Set) return convert([...value], names, path, stored);
    if (value instanceof Uint8Array) return Buffer.from(value).toString('base64');
    const out: { [key: string]: Json } = {};
    for (const [key, v] of Object.entries(value as Record<string, unknown>)) {
      const name = names(key);
      const full = path ? `${path}.${stored(key)}` : stored(key);
      let converted: Json | undefined;
      if (OPAQUE.has(full)) {
        converted = v === undefined ? undefined : (JSON.parse(JSON.stringify(v ?? null)) as Json);
        if (converted === null) converted = undefined;
      } else if (KEYED.has(full) && v && typeof v === 'object') {
        const inner: { [key: string]: Json } = {};
        for (const [id, model] of Object.entries(v as Record<string, unknown>)) {
          const c = convert(model, names, full, stored);
          if (c !== undefined) inner[id] = c;
        }
        converted = inner;
      } else {
        converted = convert(v, names, full, stored);
      }
      if (converted !== undefined) out[name] = converted;
    }
    return out;
  }
  if (typeof value === 'number' && !Number.isFinite(value)) {
    throw new InvalidInputError(`an event holds a number JSON cannot: ${value}`);
  }
  if (typeof value === 'bigint' || typeof value === 'function' || typeof value === 'symbol') {
    throw new InvalidInputError(`an event holds a ${typeof value}, which JSON cannot`);
  }
  return value as Json;
}

/** Epoch ms (ADK-JS) as the stored epoch seconds. */
export function toSeconds(ms: number): number {
  return ms / 1000;
}

/** Stored epoch seconds as epoch ms: the whole ms when that gives the same seconds back
 * (every time ADK-JS wrote), else the exact product (a time Python wrote, to the
 * microsecond and beyond), so that a read and a write give back the stored time. */
export function toMillis(seconds: number): number {
  const ms = seconds * 1000;
  const whole = Math.round(ms);
  return whole / 1000 === seconds ? whole : ms;
}

// The stored seconds of an event read, beside the ms it became: written back as they were
// while the event keeps that time (seconds -> ms -> seconds may move the last bit).
const STORED_TIME = Symbol('redis-agent-sessions stored time');

/** The canonical stored JSON object of an ADK-JS event. */
export function encodeEvent(event: Event): Record<string, Json> {
  const out = convert(event, toSnake, '', toSnake) as Record<string, Json>;
  const actions = (out.actions ?? {}) as Record<string, Json>;
  // ADK-JS keeps a routing node's route on the event, ADK Python in its actions.
  if (out.route !== undefined) {
    actions.route = out.route;
    delete out.route;
  }
  for (const key of Object.keys(actions)) if (!PY_ACTIONS.has(key)) delete actions[key];
  // The canonical form (the Python package's own Event model): both deltas always, the
  // requests only when there are any.
  actions.state_delta ??= {};
  actions.artifact_delta ??= {};
  for (const key of ['requested_auth_configs', 'requested_tool_confirmations']) {
    const held = actions[key];
    if (held && typeof held === 'object' && !Object.keys(held).length) delete actions[key];
  }
  out.actions = actions;
  // A set in both ports: stored in one order whoever wrote it.
  if (Array.isArray(out.long_running_tool_ids)) {
    out.long_running_tool_ids = [...new Set(out.long_running_tool_ids as string[])].sort();
  }
  const kept = (event as unknown as Record<symbol, [number, number] | undefined>)[STORED_TIME];
  out.timestamp = kept && kept[1] === event.timestamp ? kept[0] : toSeconds(event.timestamp);
  return out;
}

/** An ADK-JS event from its stored JSON object (written by either language). */
export function decodeEvent(stored: Record<string, unknown>): Event {
  const out = convert(stored, toCamel, '', (k) => k) as Record<string, unknown>;
  const actions = (out.actions ?? {}) as Record<string, unknown>;
  if (actions.route !== undefined) {
    out.route = actions.route;
    delete actions.route;
  }
  for (const name of ['stateDelta', 'artifactDelta', 'requestedAuthConfigs', 'requestedToolConfirmations']) {
    if (actions[name] === undefined) actions[name] = {};
  }
  out.actions = actions;
  const seconds = Number(stored.timestamp);
  out.timestamp = toMillis(seconds);
  Object.defineProperty(out, STORED_TIME, { value: [seconds, out.timestamp] });
  if (out.invocationId === undefined) out.invocationId = '';
  return out as unknown as Event;
}

/** A state value as the layout stores it (compact JSON), refusing what JSON cannot hold. */
export function encodeValue(key: string, value: unknown): string {
  const text = JSON.stringify(value, (_k, v: unknown) => {
    if (typeof v === 'number' && !Number.isFinite(v)) {
      throw new InvalidInputError(`state value ${key}: ${v} is not JSON`);
    }
    if (typeof v === 'bigint') throw new InvalidInputError(`state value ${key}: a bigint is not JSON`);
    return v;
  });
  if (text === undefined) throw new InvalidInputError(`state value ${key} is not JSON: ${String(value)}`);
  return text;
}

/**
 * A float as Python's `repr` writes it, which the metadata's times are kept in: the
 * shortest round-tripping digits (as JavaScript's), a whole number with `.0`.
 */
export function pyFloat(value: number): string {
  const text = String(value);
  return /^-?\d+$/.test(text) ? `${text}.0` : text;
}
