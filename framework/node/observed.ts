/**
 * What the observer endpoints answer, as TypeBox schemas: the types the node builds its answers
 * with (observers.ts) and the checks the inspect client applies to what it reads (inspect.ts), so
 * that the two cannot drift apart. `/metrics` answers Prometheus text (version 0.0.4) instead.
 */
import { Type, type Static } from '@sinclair/typebox';
import { STATUSES } from '../core/members.js';

export const OBSERVER_PATHS = { members: '/cluster/members', actors: '/actors', health: '/health', metrics: '/metrics' } as const;

/** `all=true` on /actors lists system and unnamed actors too. */
export const ALL_ACTORS_QUERY = 'all=true';

/** `GET /cluster/members`: every member this node knows, itself included. */
export const MemberList = Type.Array(
  Type.Object({
    node_id: Type.String(),
    addr: Type.String(),
    status: Type.Union(STATUSES.map((s) => Type.Literal(s))),
    /** The named actors with an instance on that member. */
    actors: Type.Array(Type.String()),
  }),
);
export type MemberList = Static<typeof MemberList>;
export type MemberEntry = MemberList[number];

/** `GET /actors[?all=true]`: the actors of this node; what an actor's `metadata()` adds comes as extra fields, text or numbers. */
export const ActorList = Type.Array(
  Type.Object(
    {
      name: Type.String(),
      type: Type.Union([Type.Literal('user'), Type.Literal('system'), Type.Literal('internal')]),
      actor_id: Type.String(),
      class: Type.String(),
      status: Type.String(),
    },
    { additionalProperties: Type.Union([Type.String(), Type.Number()]) },
  ),
);
export type ActorList = Static<typeof ActorList>;
export type ActorEntry = ActorList[number] & Record<string, string | number>;

/** `GET /health`. */
export const Health = Type.Object({
  status: Type.Union([Type.Literal('ok'), Type.Literal('leaving')]),
  node_id: Type.String(),
  addr: Type.String(),
  /** Whether its peers (and clients) must speak mutual TLS. */
  tls: Type.Boolean(),
  uptime_seconds: Type.Number(),
  actors_count: Type.Integer(),
  /** The user's named actors on this node. */
  actors: Type.Array(Type.String()),
  /** Named actors with an Alive instance anywhere in the cluster. */
  named_actors: Type.Array(Type.String()),
  /** The cluster's name, whether this node has joined it, and the members it knows. */
  cluster: Type.Object({ name: Type.String(), joined: Type.Boolean(), members: Type.Integer(), alive: Type.Integer() }),
});
export type Health = Static<typeof Health>;
