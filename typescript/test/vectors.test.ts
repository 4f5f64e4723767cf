/**
 * The layout's test vectors (layout/vectors/*.json, format in its README) run against this
 * service, on one node (REDIS_URL) and a cluster (REDIS_CLUSTER_URL): each vector's
 * operations, what each must return, and the exact keys and values left in Redis. It
 * mirrors the Python runner (tests/test_layout_vectors.py) rule for rule. Each vector
 * starts on an empty store: the database is flushed.
 */
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import type { Event, Session } from '@google/adk';
import { createClient, createCluster } from 'redis';

import * as errors from '../src/errors.js';
import { decodeEvent, encodeEvent } from '../src/codec.js';
import { luaDir } from '../src/scripts.js';
import { RedisSessionService } from '../src/service.js';

const VECTORS = join(luaDir(), '..', '..', 'layout', 'vectors');
const LAYOUT = 1;

type Json = any; // eslint-disable-line @typescript-eslint/no-explicit-any

function expand(value: Json): Json {
  if (Array.isArray(value)) return value.map(expand);
  if (value && typeof value === 'object') {
    const keys = Object.keys(value);
    if (keys.length === 1 && keys[0] === '$repeat') return String(value.$repeat[0]).repeat(value.$repeat[1]);
    return Object.fromEntries(keys.map((k) => [k, expand(value[k])]));
  }
  return value;
}

const numberEqual = (a: number, b: number) => Math.abs(a - b) <= 1e-6;

function jsonEqual(actual: Json, expected: Json): boolean {
  if (Array.isArray(expected)) {
    return Array.isArray(actual) && actual.length === expected.length && expected.every((e, i) => jsonEqual(actual[i], e));
  }
  if (expected && typeof expected === 'object') {
    if (!actual || typeof actual !== 'object' || Array.isArray(actual)) return false;
    const a = Object.keys(actual).sort();
    const e = Object.keys(expected).sort();
    return a.length === e.length && a.every((k, i) => k === e[i]) && e.every((k) => jsonEqual(actual[k], expected[k]));
  }
  if (typeof expected === 'number' && typeof actual === 'number') return numberEqual(actual, expected);
  return actual === expected;
}

function matches(expected: Json, raw: string | null): boolean {
  if (raw === null) return false;
  if (typeof expected === 'string') return raw === expected;
  if (typeof expected === 'number') return numberEqual(Number(raw), expected);
  if (expected && 'json' in expected) return jsonEqual(JSON.parse(raw), expected.json);
  if (expected && 'any' in expected) return true;
  throw new Error(`unknown matcher ${JSON.stringify(expected)}`);
}

interface Admin {
  nodes(): Promise<ReturnType<typeof createClient>[]>;
  close(): Promise<void>;
}

type Dump = Record<string, [string, Json]>;

async function dump(admin: Admin): Promise<Dump> {
  const out: Dump = {};
  for (const node of await admin.nodes()) {
    for (const key of (await node.sendCommand(['KEYS', '*'])) as string[]) {
      const kind = String(await node.sendCommand(['TYPE', key]));
      let value: Json;
      if (kind === 'string') value = await node.sendCommand(['GET', key]);
      else if (kind === 'hash') {
        const flat = (await node.sendCommand(['HGETALL', key])) as string[];
        value = {};
        for (let i = 0; i < flat.length; i += 2) value[flat[i]] = flat[i + 1];
      } else if (kind === 'zset') {
        const flat = (await node.sendCommand(['ZRANGE', key, '0', '-1', 'WITHSCORES'])) as string[];
        value = [];
        for (let i = 0; i < flat.length; i += 2) value.push([flat[i], flat[i + 1]]);
      } else if (kind === 'stream') {
        const list = (await node.sendCommand(['XRANGE', key, '-', '+'])) as [string, string[]][];
        value = list.map(([id, fs]) => {
          const fields: Record<string, string> = {};
          for (let i = 0; i < fs.length; i += 2) fields[fs[i]] = fs[i + 1];
          return [id, fields];
        });
      } else throw new Error(`key ${key} has a type the layout never uses: ${kind}`);
      out[key] = [kind, value];
    }
  }
  return out;
}

function checkKey(name: string, entry: Json, kind: string, value: Json): void {
  assert.equal(kind, entry.type, `key ${name}: type`);
  const want = entry.value;
  if (kind === 'string') assert.ok(matches(want, value), `key ${name}: ${value}`);
  else if (kind === 'hash') {
    assert.deepEqual(Object.keys(value).sort(), Object.keys(want).sort(), `key ${name}: fields`);
    for (const [field, m] of Object.entries(want)) assert.ok(matches(m, value[field]), `key ${name} field ${field}: ${value[field]}`);
  } else if (kind === 'zset') {
    assert.deepEqual(value.map((p: Json) => p[0]), want.map((p: Json) => p[0]), `key ${name}: members`);
    value.forEach(([m, s]: Json, i: number) => assert.ok(matches(want[i][1], s), `key ${name} ${m}: score ${s}`));
  } else {
    assert.equal(value.length, want.length, `key ${name}: entries`);
    value.forEach(([id, fields]: Json, i: number) => {
      assert.ok(matches(want[i].id, id), `key ${name}: entry ${id}`);
      assert.deepEqual(Object.keys(fields).sort(), Object.keys(want[i].fields).sort(), `key ${name} ${id}: fields`);
      for (const [f, m] of Object.entries(want[i].fields)) assert.ok(matches(m, fields[f]), `key ${name} ${id} ${f}: ${fields[f]}`);
    });
  }
}

function canonicalSession(s: Session | undefined): Json {
  if (!s) return null;
  return {
    id: s.id,
    app_name: s.appName,
    user_id: s.userId,
    state: { ...s.state },
    events: s.events.map(encodeEvent),
    last_update_time: s.lastUpdateTime / 1000,
  };
}

async function runVector(vector: Json, admin: Admin, url: string, cluster: boolean): Promise<void> {
  assert.equal(vector.layout, LAYOUT);
  let now = 0;
  const service = await RedisSessionService.fromUrl(url, { cluster, clock: () => now });
  const copies: Record<string, Session> = {};
  const keep = (op: Json, s: Session | undefined) => {
    if (op.as && s) copies[op.as] = s;
    return { session: canonicalSession(s) };
  };
  const calls: Record<string, (op: Json) => Promise<Record<string, Json>>> = {
    create_session: async (op) => {
      now = op.create_time * 1000;
      const s = await service.createSession({ appName: op.app_name, userId: op.user_id, sessionId: op.session_id, state: op.state });
      return keep(op, s);
    },
    get_session: async (op) => {
      const c = op.config;
      const config = c && { numRecentEvents: c.num_recent_events, afterTimestamp: c.after_timestamp === undefined ? undefined : c.after_timestamp * 1000 };
      return keep(op, await service.getSession({ appName: op.app_name, userId: op.user_id, sessionId: op.session_id, config }));
    },
    append_event: async (op) => {
      const event: Event = decodeEvent(op.event);
      return { event: encodeEvent(await service.appendEvent({ session: copies[op.session], event })) };
    },
    list_sessions: async (op) => {
      const listed = await service.listSessions({ appName: op.app_name, userId: op.user_id });
      return { sessions: listed.sessions.map(canonicalSession) };
    },
    delete_session: async (op) => {
      await service.deleteSession({ appName: op.app_name, userId: op.user_id, sessionId: op.session_id });
      return {};
    },
  };
  try {
    for (const [step, op] of vector.operations.entries()) {
      const where = `operation ${step} (${op.op})`;
      if (op.op === 'delete_key') {
        for (const node of await admin.nodes()) await node.sendCommand(['DEL', op.key]).catch(() => 0);
        continue;
      }
      const before = op.unchanged ? await dump(admin) : undefined;
      const expect = op.expect ?? {};
      if ('error' in expect) {
        const type = (errors as Record<string, unknown>)[expect.error] as new (...a: never[]) => Error;
        await assert.rejects(calls[op.op](op), type, where);
      } else {
        const got = await calls[op.op](op);
        for (const [name, value] of Object.entries(expect)) {
          assert.ok(jsonEqual(got[name], value), `${where}: ${name} ${JSON.stringify(got[name])}\nexpected ${JSON.stringify(value)}`);
        }
      }
      if (before) assert.deepEqual(await dump(admin), before, `${where}: changed what Redis holds`);
    }
    const layout = cluster ? 'cluster' : 'single';
    const wanted = Object.fromEntries(
      Object.entries(vector.keys as Record<string, Json>).filter(([, e]) => (e.layouts ?? [layout]).includes(layout)),
    );
    const stored = await dump(admin);
    assert.deepEqual(Object.keys(stored).sort(), Object.keys(wanted).sort(), 'keys differ');
    for (const [name, entry] of Object.entries(wanted)) checkKey(name, entry, ...stored[name]);
  } finally {
    await service.close();
  }
}

const files = readdirSync(VECTORS).filter((f) => f.endsWith('.json')).sort();

test('the vectors are there', () => assert.ok(files.length >= 8));

// Valkey's servers run when their variables are set (scripts/redis-servers.sh sets them).
const servers: [string, string | undefined, boolean, boolean][] = [
  ['single node', process.env.REDIS_URL, false, true],
  ['cluster', process.env.REDIS_CLUSTER_URL, true, true],
  ['Valkey single node', process.env.REDIS_VALKEY_URL, false, false],
  ['Valkey cluster', process.env.REDIS_VALKEY_CLUSTER_URL, true, false],
];

for (const [name, url, cluster, always] of servers) {
  if (!url && !always) continue;
  describe(`vectors, ${name}`, { skip: url ? false : 'no server URL in env' }, () => {
    let admin: Admin;
    before(async () => {
      if (cluster) {
        const c = createCluster({ rootNodes: [{ url: url! }] });
        await c.connect();
        admin = {
          nodes: () => Promise.all(c.masters.map((m) => c.nodeClient(m))) as never,
          close: () => c.close(),
        };
      } else {
        const c = createClient({ url });
        await c.connect();
        admin = { nodes: async () => [c] as never, close: () => c.close() };
      }
    });
    after(async () => admin?.close());

    for (const file of files) {
      test(file.replace(/\.json$/, ''), async () => {
        for (const node of await admin.nodes()) await node.sendCommand(['FLUSHDB']);
        const vector = expand(JSON.parse(readFileSync(join(VECTORS, file), 'utf-8')));
        await runVector(vector, admin, url!, cluster);
      });
    }
  });
}
