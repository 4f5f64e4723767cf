/**
 * The cluster layout's app step (Python's sessions/_outbox.py and _sweep.py): a user-slot
 * script records app-scope writes in the user's outbox; they are applied to the app's slot
 * afterwards by app_apply.lua, idempotently. The user is registered for the sweep first
 * (app_pending.lua), so that writes a dead worker left half done are found.
 */
import { RedisSessionsError } from './errors.js';
import { SessionKeys } from './keys.js';
import { Entry, after, streamId } from './replies.js';
import { Connection, Reply, Script } from './scripts.js';

/** Seconds a registration of a user for the sweep is trusted (Python's REGISTER_EVERY). */
const REGISTER_EVERY_MS = 60_000;

export class AppStep {
  private readonly applied = new Map<string, string>();
  private readonly registered = new Map<string, number>();

  constructor(
    private readonly conn: Connection,
    readonly cluster: boolean,
    private readonly appApply: Script,
    private readonly appPending: Script,
  ) {}

  /** The scripts' layout argument (Python's `Layout.mode`): `single`, or `cluster:<the
   * lowest outbox id of this user that may not be applied yet, as far as this worker
   * knows>`. */
  mode(keys: SessionKeys): string {
    if (!this.cluster) return 'single';
    const last = this.applied.get(`${keys.appApplied}\0${keys.userMember}`);
    if (last === undefined) return 'cluster:0-1';
    const [ms, seq] = streamId(last);
    return `cluster:${ms}-${seq + 1}`;
  }

  learn(keys: SessionKeys, applied: Reply): void {
    if (!applied) return;
    const slot = `${keys.appApplied}\0${keys.userMember}`;
    const known = this.applied.get(slot);
    if (known === undefined || after(String(applied), known)) this.applied.set(slot, String(applied));
  }

  /** Apply a user's outbox entries in the app's slot; the app state when `wantState`. */
  async apply(keys: SessionKeys, list: Entry[], wantState: boolean): Promise<Reply> {
    const flat: string[] = [];
    for (const [id, fields] of list) flat.push(id, String(fields.length / 2), ...fields);
    const reply = (await this.appApply.run(
      this.conn,
      [keys.appState, keys.appVersions, keys.appSessions, keys.appApplied, keys.appExpiry],
      [keys.userMember, wantState ? '1' : '0', String(Date.now()), '0', ...flat],
    )) as Reply[];
    this.learn(keys, reply[0]);
    return reply[1];
  }

  /** Around a user-slot script that may record app-scope writes: the user registered
   * for the sweep first, undone when the script is refused before writing. */
  async recording<T>(keys: SessionKeys, write: () => Promise<T>): Promise<T> {
    const slot = `${keys.appPending}\0${keys.userMember}`;
    const at = this.registered.get(slot);
    if (!this.cluster || (at !== undefined && Date.now() - at < REGISTER_EVERY_MS)) return write();
    const started = Date.now();
    const added = (await this.appPending.run(this.conn, [keys.appPending], [
      'add',
      keys.userMember,
      Date.now().toFixed(3),
    ])) as Reply[];
    this.registered.set(slot, started);
    try {
      return await write();
    } catch (exc) {
      if (exc instanceof RedisSessionsError) {
        this.registered.delete(slot);
        try {
          await this.appPending.run(this.conn, [keys.appPending], [
            'undo',
            keys.userMember,
            String(added[0]),
            String(added[1]),
          ]);
        } catch {
          // A registration left with nothing pending: the sweep clears it.
        }
      }
      throw exc;
    }
  }

  /** The app state hash a reader of this user sees (cluster): this user's app writes
   * still waiting in its outbox (`outbox`, from the user-slot read) applied first. */
  async readApp(keys: SessionKeys, outbox: Entry[]): Promise<Reply> {
    const [appRaw, applied] = (await Promise.all([
      this.conn.send(keys.appState, ['HGETALL', keys.appState], true),
      this.conn.send(keys.appApplied, ['HGET', keys.appApplied, keys.userMember], true),
    ])) as [Reply, Reply];
    this.learn(keys, applied);
    const pending = applied ? outbox.filter(([id]) => after(id, String(applied))) : outbox;
    if (!pending.length) return appRaw;
    return this.apply(keys, pending, true);
  }
}
