/**
 * The service against real servers: REDIS_URL (one node) and REDIS_CLUSTER_URL (a
 * cluster), as scripts/redis-servers.sh starts them; each skips without its variable.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { createEvent } from '@google/adk';
import type { Session } from '@google/adk';

import {
  AlreadyExistsError,
  InvalidInputError,
  LayoutVersionError,
  PayloadTooLargeError,
  RedisSessionService,
  SessionNotFoundError,
  StaleSessionError,
  escape,
} from '../src/index.js';
import { luaDir, luaSource, SCRIPT_NAMES, uses } from '../src/scripts.js';

const PYTHON_LUA = join(luaDir(), '..', '..', 'src', 'redis_agent_sessions', '_redis', 'lua');

test('the lua copy is the Python package\'s, byte for byte', () => {
  const copied = readdirSync(luaDir()).filter((f) => f.endsWith('.lua'));
  const needed = new Set<string>();
  for (const name of SCRIPT_NAMES) {
    needed.add(`${name}.lua`);
    for (const lib of uses(readFileSync(join(PYTHON_LUA, `${name}.lua`), 'utf-8'))) needed.add(`${lib}.lua`);
  }
  assert.deepEqual(copied.sort(), [...needed].sort(), 'run `npm run build`');
  for (const file of copied) {
    assert.equal(
      readFileSync(join(luaDir(), file), 'utf-8'),
      readFileSync(join(PYTHON_LUA, file), 'utf-8'),
      `${file} differs from the Python package's: run \`npm run build\``,
    );
  }
});

test('scripts are assembled as the Python package assembles them', () => {
  const read = luaSource('read_session');
  assert.ok(read.startsWith('#!lua flags=no-writes\n-- Prepended'));
  assert.ok(luaSource('append_event').includes('local function layout(arg)'));
});

test('keys escape identifiers as keys.py does', () => {
  assert.equal(escape('a:b{c}d e%'), 'a%3Ab%7Bc%7Dd%20e%25');
  assert.equal(escape('\u0085x\u00e9'), '%85x\u00e9');
});

const backends: [string, string | undefined, boolean][] = [
  ['single node', process.env.REDIS_URL, false],
  ['cluster', process.env.REDIS_CLUSTER_URL, true],
];

for (const [name, url, cluster] of backends) {
  describe(name, { skip: url ? false : `${cluster ? 'REDIS_CLUSTER_URL' : 'REDIS_URL'} is not set` }, () => {
    let service: RedisSessionService;
    const appName = `ts-app-${randomUUID().slice(0, 8)}`;

    before(async () => {
      service = await RedisSessionService.fromUrl(url!, { cluster, keyPrefix: 'ras-ts-test' });
    });
    after(async () => {
      await service?.close();
    });

    test('create, get, append with every scope, temp never stored', async () => {
      const created = await service.createSession({
        appName,
        userId: 'u1',
        state: { step: 'start', 'user:name': 'Ravi', 'app:motd': 'hi', 'temp:x': 1 },
      });
      assert.equal(created.state.step, 'start');
      assert.equal(created.state['user:name'], 'Ravi');
      assert.equal(created.state['app:motd'], 'hi');
      assert.equal(created.state['temp:x'], undefined);
      await assert.rejects(
        service.createSession({ appName, userId: 'u1', sessionId: created.id }),
        AlreadyExistsError,
      );
      const event = createEvent({
        invocationId: 'inv-1',
        author: 'user',
        content: { role: 'user', parts: [{ text: 'héllo 🌍' }] },
        actions: { stateDelta: { step: 'two', 'user:n': 2, 'app:count': 1, 'temp:scratch': 'x' } },
      });
      await service.appendEvent({ session: created, event });
      assert.equal(created.state.step, 'two');
      assert.equal(created.events.length, 1);
      assert.equal(event.actions.stateDelta['temp:scratch'], undefined);
      const read = await service.getSession({ appName, userId: 'u1', sessionId: created.id });
      assert.ok(read);
      assert.equal(read.state.step, 'two');
      assert.equal(read.state['user:n'], 2);
      assert.equal(read.state['app:count'], 1);
      assert.equal(read.state['temp:scratch'], undefined);
      assert.equal(read.events.length, 1);
      const back = read.events[0];
      assert.equal(back.id, event.id);
      assert.equal(back.timestamp, event.timestamp);
      assert.equal(back.invocationId, 'inv-1');
      assert.deepEqual(back.content, event.content);
      assert.deepEqual(back.actions.stateDelta, { step: 'two', 'user:n': 2, 'app:count': 1 });
      assert.equal(read.lastUpdateTime, event.timestamp);
    });

    test('a stale copy is refused and nothing is written; re-read and retry lands', async () => {
      const s = await service.createSession({ appName, userId: 'u2' });
      const copy = (await service.getSession({ appName, userId: 'u2', sessionId: s.id }))!;
      await service.appendEvent({ session: s, event: createEvent({ author: 'a', actions: { stateDelta: { k: 1 } } }) });
      const late = createEvent({ author: 'b', actions: { stateDelta: { k: 2, 'temp:t': 1 } } });
      await assert.rejects(service.appendEvent({ session: copy, event: late }), StaleSessionError);
      assert.deepEqual(late.actions.stateDelta, { k: 2, 'temp:t': 1 });
      const fresh = (await service.getSession({ appName, userId: 'u2', sessionId: s.id }))!;
      assert.equal(fresh.state.k, 1);
      assert.equal(fresh.events.length, 1);
      await service.appendEvent({ session: fresh, event: late });
      const last = (await service.getSession({ appName, userId: 'u2', sessionId: s.id }))!;
      assert.equal(last.state.k, 2);
      assert.deepEqual(last.events.map((e) => e.author), ['a', 'b']);
    });

    test('get with numRecentEvents and afterTimestamp', async () => {
      const s = await service.createSession({ appName, userId: 'u3' });
      const base = Date.now();
      for (let i = 0; i < 5; i++) {
        await service.appendEvent({ session: s, event: createEvent({ author: `a${i}`, timestamp: base + i * 10 }) });
      }
      const key = { appName, userId: 'u3', sessionId: s.id };
      const recent = (await service.getSession({ ...key, config: { numRecentEvents: 2 } }))!;
      assert.deepEqual(recent.events.map((e) => e.author), ['a3', 'a4']);
      const since = (await service.getSession({ ...key, config: { afterTimestamp: base + 20 } }))!;
      assert.deepEqual(since.events.map((e) => e.author), ['a2', 'a3', 'a4']);
      const both = (await service.getSession({ ...key, config: { afterTimestamp: base + 10, numRecentEvents: 2 } }))!;
      assert.deepEqual(both.events.map((e) => e.author), ['a3', 'a4']);
    });

    test('the layout version: recorded by the first write, a newer one refused', async () => {
      const prefix = `ras-ts-layout-${randomUUID().slice(0, 8)}`;
      const fresh = await RedisSessionService.fromUrl(url!, { cluster, keyPrefix: prefix });
      const key = `${prefix}:layout`;
      const send = (args: string[]) => (fresh.client as any).sendCommand(...(cluster ? [key, false, args] : [args]));
      try {
        await fresh.createSession({ appName, userId: 'v' });
        assert.equal(await send(['GET', key]), '1');
        await send(['SET', key, '2']);
        const late = await RedisSessionService.fromUrl(url!, { cluster, keyPrefix: prefix });
        try {
          await assert.rejects(late.createSession({ appName, userId: 'v', sessionId: 'new' }), (exc: unknown) => {
            assert.ok(exc instanceof LayoutVersionError);
            assert.equal(exc.found, '2');
            assert.equal(exc.supported, 1);
            return true;
          });
          assert.equal(await late.getSession({ appName, userId: 'v', sessionId: 'new' }).catch(() => 'refused'), 'refused');
        } finally {
          await late.close();
        }
        assert.equal(await send(['GET', key]), '2');
      } finally {
        await send(['DEL', key]);
        await fresh.close();
      }
    });

    test('list with paging, delete, missing session', async () => {
      const app = `${appName}-list`;
      const made: Session[] = [];
      for (let i = 0; i < 5; i++) made.push(await service.createSession({ appName: app, userId: i < 3 ? 'x' : 'y' }));
      // The newest update last: appended to in order.
      for (const [i, s] of made.entries()) {
        await service.appendEvent({ session: s, event: createEvent({ author: 'a', timestamp: Date.now() + i }) });
      }
      const all = await service.listSessions({ appName: app });
      assert.equal(all.totalItems, 5);
      const mine = await service.listSessions({ appName: app, userId: 'x', order: 'desc' });
      assert.deepEqual(mine.sessions.map((s) => s.id), [made[2].id, made[1].id, made[0].id]);
      const page = await service.listSessions({ appName: app, limit: 2, page: 2, order: 'asc' });
      assert.deepEqual(page.sessions.map((s) => s.id), [made[2].id, made[3].id]);
      assert.equal(page.totalPages, 3);
      await service.deleteSession({ appName: app, userId: 'x', sessionId: made[0].id });
      assert.equal(await service.getSession({ appName: app, userId: 'x', sessionId: made[0].id }), undefined);
      assert.equal((await service.listSessions({ appName: app })).totalItems, 4);
      await assert.rejects(
        service.appendEvent({ session: made[0], event: createEvent({ author: 'a' }) }),
        SessionNotFoundError,
      );
      await assert.rejects(service.getSession({ appName: app, userId: ' x', sessionId: 's' }), InvalidInputError);
      const big = createEvent({ author: 'a', actions: { stateDelta: { 'temp:t': 1, blob: 'x'.repeat(1 << 20) } } });
      const kept = made[1].events.length;
      await assert.rejects(service.appendEvent({ session: made[1], event: big }), PayloadTooLargeError);
      assert.equal('temp:t' in big.actions.stateDelta, true);
      assert.equal((await service.getSession({ appName: app, userId: 'x', sessionId: made[1].id }))!.events.length, kept);
      await assert.rejects(
        service.createSession({ appName: app, userId: 'x', state: { blob: 'é'.repeat(1 << 19) } }),
        PayloadTooLargeError,
      );
    });
  });
}
