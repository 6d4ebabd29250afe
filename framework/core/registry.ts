/**
 * The actors running on this node: spawning them (name and parameter checks, the cell and its
 * hooks), finding them by name or id, and stopping them. Named actors are public; `namesChanged`
 * hears every change of their list, which the system publishes to the cluster.
 */
import { randomUUID } from 'node:crypto';
import { actorMeta } from './actor.js';
import { ActorCell } from './cell.js';
import type { ActorClass, ActorSystemView, SpawnOptions } from './context.js';
import { ActorError } from './errors.js';
import { ACTOR_NAME_RE as NAME_RE } from './members.js';
import type { NodeMetrics } from './metrics.js';
import { checkParams, problemText } from './params.js';

/** Names of the system's own actors; user actors may not take them. */
const SYSTEM_NAME = /^(_|system\/)/;

/** How `/actors` lists an actor: named by a user, named by the system, or unnamed. */
export type ActorKind = 'user' | 'system' | 'internal';

export class LocalActors {
  private readonly byId = new Map<string, ActorCell>();
  private readonly byName = new Map<string, ActorCell>();
  /** Called after each handled message (pre-bound series: this is the hot path). */
  private readonly observe: (seconds: number, failed: boolean) => void;

  constructor(
    private readonly system: ActorSystemView,
    private readonly metrics: NodeMetrics,
    private readonly log: (message: string) => void,
    private readonly namesChanged: (names: string[]) => void,
  ) {
    const ok = metrics.messages.bind({ outcome: 'ok' });
    const error = metrics.messages.bind({ outcome: 'error' });
    const handling = metrics.handling.bind();
    this.observe = (seconds, failed) => {
      handling(seconds);
      (failed ? error : ok)();
    };
  }

  /** Starts a user actor; the names of system actors (`_...`, `system/...`) are refused. */
  async spawn(cls: ActorClass<never>, options: SpawnOptions = {}): Promise<ActorCell> {
    if (options.name !== undefined && SYSTEM_NAME.test(options.name)) {
      throw new ActorError('bad-request', `actor name '${options.name}' is reserved for system actors (starts with '_' or 'system/')`);
    }
    return this.start(cls, options.name, options);
  }

  /** Starts one of the system's own actors under its reserved name. */
  spawnSystem(cls: ActorClass<never>, name: string): Promise<ActorCell> {
    return this.start(cls, name);
  }

  private async start(cls: ActorClass<never>, name: string | undefined, options: SpawnOptions = {}): Promise<ActorCell> {
    const meta = actorMeta(cls);
    if (!meta) throw new ActorError('bad-request', `${cls.name || 'class'} is not an actor class (extend Actor or wrap it with remote())`);
    if (name !== undefined) {
      if (!NAME_RE.test(name)) throw new ActorError('bad-request', `actor name '${name}' must match ${NAME_RE}`);
      if (this.byName.has(name)) throw new ActorError('bad-request', `an actor named '${name}' already runs on this node`);
    }
    const checked = checkParams(meta.params, options.params ?? {});
    if ('problems' in checked) {
      throw new ActorError('bad-request', `invalid parameters for ${meta.className}: ${checked.problems.map((p) => problemText(p, '')).join('; ')}`);
    }
    const { params } = checked;
    const cell = new ActorCell(randomUUID().replaceAll('-', ''), name, cls, meta, params, { system: this.system }, {
      observe: this.observe,
      stopped: (c) => this.forget(c),
      log: this.log,
    });
    cell.extra = options.metadata ?? {};
    await cell.start();
    this.byId.set(cell.id, cell);
    this.metrics.created.inc();
    if (name !== undefined) {
      this.byName.set(name, cell);
      this.namesChanged([...this.byName.keys()]);
    }
    return cell;
  }

  /** Stops one actor (by name or id); false when there is none. */
  async stop(nameOrId: string): Promise<boolean> {
    const cell = this.byName.get(nameOrId) ?? this.byId.get(nameOrId);
    if (!cell) return false;
    await cell.stop();
    return true;
  }

  async stopAll(): Promise<void> {
    await Promise.allSettled([...this.byId.values()].map((c) => c.stop()));
  }

  private forget(cell: ActorCell): void {
    this.byId.delete(cell.id);
    this.metrics.stopped.inc();
    if (cell.name !== undefined && this.byName.get(cell.name) === cell) {
      this.byName.delete(cell.name);
      this.namesChanged([...this.byName.keys()]);
    }
  }

  named(name: string): ActorCell | undefined {
    return this.byName.get(name);
  }

  withId(id: string): ActorCell | undefined {
    return this.byId.get(id);
  }

  all(): Iterable<ActorCell> {
    return this.byId.values();
  }

  get size(): number {
    return this.byId.size;
  }

  /** Messages queued or waiting in all mailboxes. */
  get load(): number {
    let total = 0;
    for (const cell of this.byId.values()) total += cell.load;
    return total;
  }

  /** Names of the user's named actors, sorted. */
  userNames(): string[] {
    return [...this.byName.keys()].filter((n) => !SYSTEM_NAME.test(n)).sort();
  }

  kindOf(cell: ActorCell): ActorKind {
    return cell.name === undefined ? 'internal' : SYSTEM_NAME.test(cell.name) ? 'system' : 'user';
  }
}
