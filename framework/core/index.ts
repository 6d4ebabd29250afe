/** The actor system's public surface. */
export { Actor, remote, actorMeta, type ActorClass, type ActorContext, type ActorOptions, type ActorMeta, type RestartPolicy } from './actor.js';
export { ActorError, type ActorErrorCode } from './errors.js';
export { ActorSystem, ActorRef, RESOLVE_POLICIES, type ResolvePolicy, type SystemOptions, type SpawnOptions, type CallOptions } from './system.js';
export { DEFAULT_TIMERS, type MemberStatus, type MembershipTimers, type MemberRecord } from './membership.js';
export { Type } from '@sinclair/typebox';
