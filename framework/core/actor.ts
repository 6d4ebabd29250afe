/**
 * Actor classes: the `Actor` base class, `remote()` for plain classes, and the metadata both carry
 * (constructor parameter schema, restart policy) that the system and `actorctl actor` read.
 */
import { type TObject, Type } from '@sinclair/typebox';
import type { ActorClass, ActorContext, ActorMetadata } from './context.js';

/** How a failing actor is treated. `never`: a method's error goes to its caller and the instance keeps
 * running. `on-failure`: the error goes to the caller and the instance is rebuilt after a backoff. */
export type RestartPolicy = 'never' | 'on-failure';

export interface ActorOptions {
  /** Constructor parameters (names, types, defaults); the constructor receives one object of them. */
  params?: TObject;
  restart?: RestartPolicy;
  /** Restarts allowed inside `restartWindowMs` before the actor is stopped for good. */
  maxRestarts?: number;
  restartWindowMs?: number;
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** Messages waiting in the mailbox before senders are held back. */
  mailboxCapacity?: number;
}

export interface ActorMeta extends Required<Omit<ActorOptions, 'params'>> {
  params: TObject;
  className: string;
}

// A global symbol so a class loaded through two module paths is still recognised.
const META = Symbol.for('agent-infra.framework.actor');

export const DEFAULT_OPTIONS: Omit<ActorMeta, 'params' | 'className'> = {
  restart: 'never',
  maxRestarts: 3,
  restartWindowMs: 60_000,
  minBackoffMs: 100,
  maxBackoffMs: 30_000,
  mailboxCapacity: 256,
};

/** Base class for actors: override the hooks you need; every public method is callable by name. */
export abstract class Actor {
  /** Set before `onStart`. */
  context!: ActorContext;
  onStart(): void | Promise<void> {}
  onStop(): void | Promise<void> {}
  /** Extra key/values shown by `/actors`. */
  metadata(): ActorMetadata {
    return {};
  }
}

/** Marks a plain class (or an Actor subclass) as an actor class and records its options. */
export function remote<C extends ActorClass<never>>(cls: C, options: ActorOptions = {}): C {
  const meta: ActorMeta = {
    ...DEFAULT_OPTIONS,
    ...Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)),
    params: options.params ?? Type.Object({}),
    className: cls.name,
  };
  Object.defineProperty(cls, META, { value: meta, enumerable: false });
  return cls;
}

function isActorSubclass(value: unknown): boolean {
  for (let p = typeof value === 'function' ? (value as { prototype: unknown }).prototype : undefined; p; p = Object.getPrototypeOf(p)) {
    if (p === Actor.prototype || (p as { constructor?: { name?: string } }).constructor?.name === 'Actor') return true;
  }
  return false;
}

/** The metadata of an actor class, or undefined when `value` is neither remote() nor an Actor subclass. */
export function actorMeta(value: unknown): ActorMeta | undefined {
  if (typeof value !== 'function') return undefined;
  const own = (value as unknown as Record<symbol, ActorMeta | undefined>)[META];
  if (own) return own;
  if (!isActorSubclass(value)) return undefined;
  const params = (value as { params?: unknown }).params;
  return { ...DEFAULT_OPTIONS, params: isObjectSchema(params) ? params : Type.Object({}), className: value.name };
}

function isObjectSchema(value: unknown): value is TObject {
  return typeof value === 'object' && value !== null && (value as { type?: unknown }).type === 'object';
}

const HIDDEN_METHODS = new Set(['constructor', 'onStart', 'onStop', 'metadata']);

/** Names callable on an instance: public methods of its class chain, up to (not including) Actor/Object. */
export function callableMethods(instance: object): Set<string> {
  const names = new Set<string>();
  for (let p = Object.getPrototypeOf(instance); p && p !== Object.prototype && p !== Actor.prototype; p = Object.getPrototypeOf(p)) {
    for (const key of Object.getOwnPropertyNames(p)) {
      if (HIDDEN_METHODS.has(key) || key.startsWith('_')) continue;
      const d = Object.getOwnPropertyDescriptor(p, key);
      if (d && typeof d.value === 'function') names.add(key);
    }
  }
  return names;
}
