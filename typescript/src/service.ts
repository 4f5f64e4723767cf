/**
 * `RedisSessionService`: ADK-JS's `BaseSessionService` on the Redis layout of the Python
 * package `redis-agent-sessions`, running the same Lua scripts, so that Python and Node
 * workers serve the same conversations.
 */
import { randomUUID } from 'node:crypto';

import { BaseSessionService } from '@google/adk';
import type {
  AppendEventRequest,
  CreateSessionRequest,
  DeleteSessionRequest,
  Event,
  GetSessionRequest,
  ListSessionsRequest,
  ListSessionsResponse,
  Session,
} from '@google/adk';
import { createClient, createCluster } from 'redis';

import { AppStep } from './appstep.js';
import { encodeEvent, pyFloat, toMillis, toSeconds } from './codec.js';
import {
  AlreadyExistsError,
  CorruptDataError,
  IncompleteSessionError,
  InvalidInputError,
  LayoutVersionError,
  PayloadTooLargeError,
  SessionNotFoundError,
  StaleSessionError,
} from './errors.js';
import { KeySpace, escape, splitAppMember } from './keys.js';
import {
  TEMP,
  checkId,
  decodeHash,
  entries,
  merged,
  split,
  stateArgv,
  storedBytes,
  storedEvents,
} from './replies.js';
import { Connection, Reply, SCRIPT_NAMES, Script, ScriptName, pairs } from './scripts.js';

const compare = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** The event times the Python services take (years 1 to 9999), in epoch ms. */
const MIN_TIME_MS = -62135596800000;
const MAX_TIME_MS = 253402300799000;
/** The layout this package reads and writes (docs/layout-spec.md). */
export const LAYOUT_VERSION = 1;

export interface RedisSessionServiceOptions {
  /** Key prefix (default `ras`): the same as the Python workers sharing the store. */
  keyPrefix?: string;
  /** Sessions expire this long after their last write (0 or unset: never). */
  ttlSeconds?: number;
  /** `reject` (default): a stale copy's append fails; `merge`: it applies, last wins. */
  stalePolicy?: 'reject' | 'merge';
  /** Most bytes of an event's JSON with its state changes, or of a create's state
   * (default 1 MiB, as the Python services' `max_payload_bytes`). */
  maxPayloadBytes?: number;
  /** The clock creations are stamped with, in epoch ms (default `Date.now`): a test pins it. */
  clock?: () => number;
}

type AnyClient = ReturnType<typeof createClient>;
type AnyCluster = ReturnType<typeof createCluster>;

/**
 * ADK-JS's session service on Redis, on one node or a Redis Cluster, sharing the layout
 * (and every session) with the Python package's services.
 */
export class RedisSessionService extends BaseSessionService {
  readonly keys: KeySpace;
  readonly cluster: boolean;
  private readonly conn: Connection;
  private readonly scripts: Record<ScriptName, Script>;
  private readonly revisions = new WeakMap<Session, number>();
  private readonly step: AppStep;
  private readonly listed = new Set<string>();
  private readonly ttl: number;
  private readonly stalePolicy: 'reject' | 'merge';
  private readonly clock: () => number;
  private readonly maxPayloadBytes: number;
  private layoutChecked = false;
  private layoutRecorded = false;

  /** A service on a connected node-redis client (`createClient`) or cluster (`createCluster`). */
  constructor(
    readonly client: AnyClient | AnyCluster,
    options: RedisSessionServiceOptions & { cluster?: boolean } = {},
  ) {
    super();
    this.cluster = options.cluster ?? 'masters' in client;
    this.keys = new KeySpace(options.keyPrefix ?? 'ras');
    this.ttl = options.ttlSeconds ?? 0;
    this.stalePolicy = options.stalePolicy ?? 'reject';
    this.clock = options.clock ?? Date.now;
    this.maxPayloadBytes = options.maxPayloadBytes ?? 1 << 20;
    if (this.cluster) {
      const cluster = client as AnyCluster;
      this.conn = { send: (key, args, ro) => cluster.sendCommand(key, ro ?? false, args) };
    } else {
      const node = client as AnyClient;
      this.conn = { send: (_key, args) => node.sendCommand(args) };
    }
    this.scripts = Object.fromEntries(SCRIPT_NAMES.map((n) => [n, new Script(n)])) as Record<ScriptName, Script>;
    this.step = new AppStep(this.conn, this.cluster, this.scripts.app_apply, this.scripts.app_pending);
  }

  /** A service with its own connection: `redis://...` for one node; with `cluster: true`,
   * any node of a Redis Cluster. {@link close} closes it. */
  static async fromUrl(
    url: string,
    options: RedisSessionServiceOptions & { cluster?: boolean } = {},
  ): Promise<RedisSessionService> {
    if (options.cluster) {
      const cluster = createCluster({ rootNodes: [{ url }] });
      cluster.on('error', () => {}); // surfaced by the command that meets it
      await cluster.connect();
      return new RedisSessionService(cluster, { ...options, cluster: true });
    }
    const client = createClient({ url });
    client.on('error', () => {});
    await client.connect();
    return new RedisSessionService(client, { ...options, cluster: false });
  }

  async close(): Promise<void> {
    await this.client.close();
  }

  /** The revision a session object was read or written at (undefined: unknown). */
  revisionOf(session: Session): number | undefined {
    return this.revisions.get(session);
  }

  private checkSize(what: string, size: number): void {
    if (size > this.maxPayloadBytes) throw new PayloadTooLargeError(what, size, this.maxPayloadBytes);
  }

  // -- the layout version (Python's _redis/layout_version.py) ------------------------------

  /** Before the first operation: a store that records a newer layout is refused. */
  private async ready(): Promise<void> {
    if (this.layoutChecked) return;
    const key = this.keys.layout();
    const found = (await this.conn.send(key, ['GET', key], true)) as string | null;
    if (found !== null) {
      const version = /^[0-9]+$/.test(found) ? Number(found) : NaN;
      if (!(version > 0 && version <= LAYOUT_VERSION)) throw new LayoutVersionError(key, found, LAYOUT_VERSION);
    }
    // A store written before the layout was recorded is layout 1.
    this.layoutRecorded = found !== null;
    this.layoutChecked = true;
  }

  /** After a write to a store that did not record its layout: record it (once, never
   * over a newer worker's). A user that may only read the key (a tenant's) leaves it. */
  private async recordLayout(): Promise<void> {
    if (this.layoutRecorded) return;
    this.layoutRecorded = true;
    const key = this.keys.layout();
    try {
      await this.conn.send(key, ['SET', key, String(LAYOUT_VERSION), 'NX']);
    } catch (exc) {
      if (!String((exc as Error).message).startsWith('NOPERM')) throw exc;
    }
  }

  /** The registry of app names: checked before a create, listed after. */
  private async listing(appName: string, write: boolean, firstCreated = 0): Promise<void> {
    if (this.listed.has(appName)) return;
    await this.scripts.register_app.run(this.conn, [this.keys.apps()], [
      escape(appName),
      pyFloat(firstCreated),
      write ? '1' : '',
    ]);
    if (write) this.listed.add(appName);
  }

  // -- BaseSessionService -----------------------------------------------------------------

  async createSession({ appName, userId, state, sessionId }: CreateSessionRequest): Promise<Session> {
    checkId('appName', appName);
    checkId('userId', userId);
    const id = sessionId === undefined ? randomUUID() : checkId('sessionId', sessionId);
    await this.ready();
    if (state !== undefined && (state === null || typeof state !== 'object' || Array.isArray(state))) {
      throw new InvalidInputError('state must be an object');
    }
    const scoped = split(state ?? {});
    this.checkSize('initial state', storedBytes(scoped));
    const keys = this.keys.session(appName, userId, id);
    const now = this.clock();
    const created = pyFloat(toSeconds(now));
    const appKeys = this.cluster ? [keys.appOutbox] : [keys.appState, keys.appSessions, keys.appUpdated, keys.appExpiry];
    const callKeys = [keys.meta, keys.state, keys.events, keys.eventIds, keys.userState, keys.userSessions, keys.userUpdated, ...appKeys];
    const args = [id, appName, userId, created, String(this.ttl), keys.appMember, this.step.mode(keys), '', String(now), '0', ...stateArgv(scoped)];
    await this.listing(appName, false);
    const reply = (await this.step.recording(keys, () => this.scripts.create_session.run(this.conn, callKeys, args))) as Reply[];
    await this.listing(appName, true, toSeconds(now));
    let appRaw: Reply = [];
    if (this.cluster) {
      const outbox = entries(reply[0] === 1 ? reply[2] : reply[1]);
      if (outbox.length) appRaw = await this.step.apply(keys, outbox, reply[0] === 1);
      else if (reply[0] === 1) appRaw = await this.step.readApp(keys, []);
    } else if (reply[0] === 1) {
      appRaw = reply[2];
    }
    if (reply[0] !== 1) throw new AlreadyExistsError(`Session with id ${id} already exists.`);
    await this.recordLayout();
    const sessionState: Record<string, unknown> = Object.create(null);
    for (let i = 0; i < scoped[0].length; i += 2) sessionState[scoped[0][i]] = JSON.parse(scoped[0][i + 1]);
    const session: Session = {
      id,
      appName,
      userId,
      state: merged(sessionState, decodeHash(keys.userState, reply[1]), decodeHash(keys.appState, appRaw)),
      events: [],
      lastUpdateTime: now,
    };
    this.revisions.set(session, 0);
    return session;
  }

  async getSession({ appName, userId, sessionId, config }: GetSessionRequest): Promise<Session | undefined> {
    checkId('appName', appName);
    checkId('userId', userId);
    checkId('sessionId', sessionId);
    await this.ready();
    const keys = this.keys.session(appName, userId, sessionId);
    const recent = config?.numRecentEvents;
    const since = config?.afterTimestamp;
    // Stream ids are event times in ms: a read after a time starts at its millisecond.
    const start = since ? String(Math.max(0, Math.floor(since))) : '-';
    // As the Python services read it: 0 recent events is none (ADK-JS's in-memory service
    // reads 0 as no limit; a store shared with Python workers answers as they do).
    const range = recent === 0 ? 'none' : recent && !since ? 'recent' : 'all';
    const reply = (await this.scripts.read_session.run(
      this.conn,
      [keys.meta, keys.state, keys.userState, keys.events, this.cluster ? keys.appOutbox : keys.appState, keys.eventIds],
      [range, start, String(recent ?? 0), this.step.mode(keys)],
    )) as Reply[];
    if (!reply.length) return undefined;
    const [metaRaw, stateRaw, userRaw, shared, eventsRaw, present] = reply;
    const meta = pairs(metaRaw);
    const id = meta.id;
    const rev = Number(meta.rev);
    if (id === undefined || meta.app_name === undefined || meta.user_id === undefined || !Number.isInteger(rev)) {
      throw new CorruptDataError(keys.meta, 'session metadata is missing or bad');
    }
    const missing: string[] = [];
    const [events, eventIds] = present as number[];
    if (rev > 0 && !events) missing.push('events');
    if (rev > 0 && !eventIds) missing.push('event ids');
    if (!(stateRaw as Reply[]).length && meta.has_state) missing.push('session state');
    if (missing.length) throw new IncompleteSessionError(appName, userId, sessionId, missing, keys.meta);
    const appRaw = this.cluster ? await this.step.readApp(keys, entries(shared)) : shared;
    let list = storedEvents(keys.events, eventsRaw);
    if (range === 'recent') list.reverse();
    if (since) list = list.filter((e) => e.timestamp >= since);
    if (recent) list = list.slice(-recent);
    else if (recent === 0) list = [];
    const session: Session = {
      id,
      appName: meta.app_name,
      userId: meta.user_id,
      state: merged(decodeHash(keys.state, stateRaw), decodeHash(keys.userState, userRaw), decodeHash(keys.appState, appRaw)),
      events: list,
      lastUpdateTime: toMillis(Number(meta.last_update_time)),
    };
    this.revisions.set(session, rev);
    return session;
  }

  async listSessions({ appName, userId, limit, offset, page, order }: ListSessionsRequest): Promise<ListSessionsResponse> {
    checkId('appName', appName);
    if (userId !== undefined) checkId('userId', userId);
    await this.ready();
    let pairsFound: [string, string][];
    if (userId !== undefined) {
      checkId('userId', userId);
      const index = this.keys.session(appName, userId, '-').userSessions;
      const ids = (await this.conn.send(index, ['ZRANGE', index, '0', '-1'], true)) as string[];
      pairsFound = ids.map((s) => [userId, s]);
    } else {
      const index = this.keys.session(appName, '-', '-').appSessions;
      const members = (await this.conn.send(index, ['ZRANGE', index, '0', '-1'], true)) as string[];
      pairsFound = members.map(splitAppMember);
    }
    // Each session with its merged state (no events), as the Python services list them.
    const read = (key: string, args: string[]) => this.conn.send(key, args, true) as Promise<Reply>;
    const found = await Promise.all(
      pairsFound.map(([u, s]) => {
        const keys = this.keys.session(appName, u, s);
        return Promise.all([read(keys.meta, ['HMGET', keys.meta, 'id', 'last_update_time']), read(keys.state, ['HGETALL', keys.state])]);
      }),
    );
    const users = [...new Set(pairsFound.map(([u]) => u))];
    const userStates = new Map<string, Record<string, unknown>>();
    let appRaw: Reply = [];
    await Promise.all(
      users.map(async (u) => {
        const keys = this.keys.session(appName, u, '-');
        userStates.set(u, decodeHash(keys.userState, await read(keys.userState, ['HGETALL', keys.userState])));
        if (this.cluster) {
          // This user's app writes still pending are applied first: the state shown has them.
          const first = this.step.mode(keys).slice('cluster:'.length);
          const outbox = entries(await read(keys.appOutbox, ['XRANGE', keys.appOutbox, first, '+']));
          appRaw = await this.step.readApp(keys, outbox);
        }
      }),
    );
    if (!this.cluster) {
      const key = this.keys.session(appName, '-', '-').appState;
      appRaw = await read(key, ['HGETALL', key]);
    }
    const appState = decodeHash(this.keys.session(appName, '-', '-').appState, appRaw);
    // Expired sessions leave index entries behind: they are skipped (the Python
    // services' writes and listings drop them).
    const all: Session[] = [];
    pairsFound.forEach(([u, s], i) => {
      const [[id, updated], state] = found[i] as [(string | null)[], Reply];
      if (id === null || updated === null) return;
      const sessionState = decodeHash(this.keys.session(appName, u, s).state, state);
      all.push({
        id,
        appName,
        userId: u,
        state: merged(sessionState, userStates.get(u)!, appState),
        events: [],
        lastUpdateTime: toMillis(Number(updated)),
      });
    });
    // Oldest update first unless asked otherwise, as the Python services list.
    // Ties by user id, then session id, as the Python services sort.
    const tie = (a: Session, b: Session) => compare(a.userId, b.userId) || compare(a.id, b.id);
    if (order !== 'desc') all.sort((a, b) => a.lastUpdateTime - b.lastUpdateTime || tie(a, b));
    else all.sort((a, b) => b.lastUpdateTime - a.lastUpdateTime || tie(a, b));
    const totalItems = all.length;
    if (limit === undefined) {
      return { sessions: offset ? all.slice(offset) : all, page: 1, limit: totalItems, totalItems, totalPages: totalItems ? 1 : 0 };
    }
    const from = page !== undefined ? (page - 1) * limit : (offset ?? 0);
    return {
      sessions: all.slice(from, from + limit),
      page: page ?? (limit === 0 ? 1 : Math.floor(from / limit) + 1),
      limit,
      totalItems,
      totalPages: limit === 0 ? 0 : Math.ceil(totalItems / limit),
    };
  }

  async deleteSession({ appName, userId, sessionId }: DeleteSessionRequest): Promise<void> {
    checkId('appName', appName);
    checkId('userId', userId);
    checkId('sessionId', sessionId);
    await this.ready();
    const keys = this.keys.session(appName, userId, sessionId);
    const appKeys = this.cluster ? [keys.appOutbox] : [keys.appSessions];
    const rest = this.cluster ? [] : [keys.appUpdated, keys.appExpiry];
    const reply = (await this.step.recording(keys, () =>
      this.scripts.delete_session.run(
        this.conn,
        [keys.meta, keys.state, keys.events, keys.eventIds, keys.userSessions, ...appKeys, keys.userUpdated, keys.compactions, ...rest],
        [sessionId, keys.appMember, this.step.mode(keys)],
      ),
    )) as Reply[];
    const outbox = entries(reply[1]);
    if (this.cluster && outbox.length) await this.step.apply(keys, outbox, false);
  }

  async appendEvent({ session, event }: AppendEventRequest): Promise<Event> {
    if (event.partial) return event;
    checkId('event id', event.id);
    checkId('appName', session.appName);
    checkId('userId', session.userId);
    checkId('session id', session.id);
    if (typeof event.timestamp !== 'number' || !(event.timestamp >= MIN_TIME_MS && event.timestamp <= MAX_TIME_MS)) {
      throw new InvalidInputError(`event timestamp must be epoch ms of the years 1 to 9999, got ${event.timestamp}`);
    }
    await this.ready();
    const delta = (event.actions?.stateDelta ?? {}) as Record<string, unknown>;
    const stored: Record<string, unknown> = Object.create(null);
    for (const [k, v] of Object.entries(delta)) if (!k.startsWith(TEMP)) stored[k] = v;
    const scoped = split(stored);
    const keys = this.keys.session(session.appName, session.userId, session.id);
    const revision = this.revisions.get(session);
    const lastEventId = session.events.length ? session.events[session.events.length - 1].id : '';
    // temp: values are never stored; on failure the caller's event is as it was.
    event.actions.stateDelta = stored;
    let reply: Reply[];
    try {
      const raw = JSON.stringify(encodeEvent(event));
      // The delta is stored twice, in the event and in the state hashes: both count.
      this.checkSize('event with its state changes', Buffer.byteLength(raw) + storedBytes(scoped));
      const appKeys = this.cluster ? [keys.appOutbox] : [keys.appState];
      const rest = this.cluster ? [] : [keys.appUpdated, keys.appExpiry];
      const callKeys = [keys.meta, keys.state, keys.events, keys.eventIds, keys.userState, ...appKeys, keys.userUpdated, keys.compactions, ...rest];
      const args = [
        revision === undefined ? '' : String(revision),
        lastEventId,
        this.stalePolicy,
        event.id,
        raw,
        String(Math.max(0, Math.floor(event.timestamp))),
        pyFloat(toSeconds(event.timestamp)),
        String(this.ttl),
        this.step.mode(keys),
        session.id,
        keys.appMember,
        '', // compaction: ADK-JS events carry no compaction summary
        '', // full_reads
        '0', // catch_up_limit: a stale copy reads again itself
        '',
        String(Date.now()),
        '0', // expiry_take: the Python workers' writes check the expiry index
        '', // schema: not the Python models' own encoding, so readers validate it
        ...stateArgv(scoped),
      ];
      const run = () => this.scripts.append_event.run(this.conn, callKeys, args);
      reply = (await (scoped[2].length ? this.step.recording(keys, run) : run())) as Reply[];
      const status = reply[0];
      if (status === -1) throw new SessionNotFoundError(`Session ${session.id} not found.`);
      if (status === -2) throw new StaleSessionError();
      if (status === -5) {
        const missing = (reply.slice(2) as string[]).map(String);
        throw new IncompleteSessionError(session.appName, session.userId, session.id, missing, String(reply[1]));
      }
      const outbox = this.cluster ? entries(reply[3]) : [];
      if (outbox.length) await this.step.apply(keys, outbox, false);
    } catch (exc) {
      event.actions.stateDelta = delta;
      throw exc;
    }
    await this.recordLayout();
    const made = Number(reply[1]);
    // A duplicate whose revision follows the caller's is a retry after a lost reply.
    if (reply[0] === 1 || revision === made - 1) {
      await super.appendEvent({ session, event });
      session.lastUpdateTime = event.timestamp;
      const merge = revision === undefined || made !== revision + 1;
      if (merge && this.stalePolicy === 'merge') this.revisions.delete(session);
      else this.revisions.set(session, made);
    }
    return event;
  }
}

