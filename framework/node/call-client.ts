/**
 * `actorctl call`: calls a named actor from outside the cluster, without joining it. The member
 * list of the first seed that answers says which Alive members host the name; the call goes to
 * one of them (`POST /named/<name>`, as any HTTP/2 client may), and to the next when that one has
 * no such actor any more or cannot be reached.
 */
import { ActorError } from '../core/errors.js';
import { callBodyOf, decodeReply, remoteStream } from '../core/remote.js';
import { withClient } from './client.js';
import type { InspectOptions } from './inspect-types.js';

export type ClientCallMode = 'ask' | 'tell' | 'stream';

export interface ClientCall extends Omit<InspectOptions, 'bestEffort'> {
  name: string;
  method: string;
  /** The arguments: the JSON text of an array (checked by the caller), sent as it is. */
  argsJson: Buffer;
  mode: ClientCallMode;
  /** Cancels the call (a streamed reply stops). */
  signal: AbortSignal;
}

/** The reply of an ask (undefined for a tell); a streamed reply's items go to `onItem` as they come. */
export function callActor(call: ClientCall, onItem: (item: unknown) => void): Promise<unknown> {
  return withClient({ ...call, bestEffort: false }, async (client) => {
    const { members } = await client.members(call.seeds);
    const hosts = members.filter((m) => m.status === 'Alive' && m.actors.includes(call.name));
    if (!hosts.length) throw new ActorError('not-found', `no Alive member hosts an actor named '${call.name}' (members: ${members.length})`);
    // Start at a random instance, spreading callers over them as resolution inside the cluster does.
    const first = Math.floor(Math.random() * hosts.length);
    const order = [...hosts.slice(first), ...hosts.slice(0, first)];
    const path = `/named/${encodeURIComponent(call.name)}`;
    const body = callBodyOf(call.method, call.argsJson);
    let last: ActorError | undefined;
    for (const host of order) {
      let started = false;
      try {
        if (call.mode === 'stream') {
          for await (const item of remoteStream(client.transport, host.addr, path, body, call.timeoutMs, call.signal)) {
            started = true;
            onItem(item);
          }
          return undefined;
        }
        const reply = await client.transport.request(host.addr, path, { headers: { 'x-message-mode': call.mode }, body, timeoutMs: call.timeoutMs });
        return decodeReply(reply.status, reply.body, host.addr);
      } catch (error) {
        // The next instance is tried when this one has no such actor any more or cannot be reached,
        // but never once a stream has handed on items (it would start again).
        const retry = !started && error instanceof ActorError && (error.code === 'not-found' || error.code === 'unreachable');
        if (!retry) throw error;
        last = error;
      }
    }
    throw last!;
  });
}
