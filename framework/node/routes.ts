/**
 * The routes of a node's h2c listener, in one table: actor calls (the call channel and the
 * per-message routes), membership, the observer endpoints and, in tests only, the fault hook.
 */
import type http2 from 'node:http2';
import { CHANNEL_PATH } from '../core/channel.js';
import { SWIM_PATH } from '../core/membership.js';
import { readBody, type Transport } from '../core/transport.js';
import type { CallServer } from './calls.js';
import { serveSwim } from './gossip.js';
import { OBSERVER_PATHS } from './observed.js';
import { actorList, health, memberList, renderMetrics, type ObservedNode } from './observers.js';
import { RouteTable, respond, type Request } from './route-table.js';

const POST = ['POST'];
/** Observers answer HEAD too, as any read-only HTTP resource does. */
const GET = ['GET', 'HEAD'];

/** What the routes reach of a node. */
export interface ServedNode extends ObservedNode {
  readonly calls: CallServer;
  readonly transport: Transport;
}

export function nodeRoutes(node: ServedNode, options: { testFaults: boolean }): RouteTable {
  const call = ({ stream, headers, path }: Request): void => void node.calls.serveStream(stream, headers, path);
  const table = new RouteTable()
    .on(POST, CHANNEL_PATH, ({ stream }) => node.calls.openChannel(stream))
    .under(POST, '/named/', call)
    .under(POST, '/actors/', call)
    .on(POST, SWIM_PATH, ({ stream }) => void serveSwim(node, stream))
    .on(GET, OBSERVER_PATHS.members, ({ stream }) => respond(stream, 200, memberList(node)))
    .on(GET, OBSERVER_PATHS.actors, ({ stream, query }) => respond(stream, 200, actorList(node, query?.get('all') === 'true')))
    .on(GET, OBSERVER_PATHS.health, ({ stream }) => respond(stream, 200, health(node)))
    .on(GET, OBSERVER_PATHS.metrics, ({ stream }) => {
      stream.respond({ ':status': 200, 'content-type': 'text/plain; version=0.0.4' });
      stream.end(renderMetrics(node));
    });
  if (options.testFaults) table.on(POST, '/_test/faults', ({ stream }) => void blockAddresses(node.transport, stream));
  return table;
}

/** The test-only fault hook: outgoing traffic to the addresses in `{block: [...]}` fails from now on. */
async function blockAddresses(transport: Transport, stream: http2.ServerHttp2Stream): Promise<void> {
  try {
    const { block } = JSON.parse((await readBody(stream)).toString('utf8')) as { block: string[] };
    transport.blocked.clear();
    for (const a of block) transport.blocked.add(a);
    respond(stream, 200, { blocked: block });
  } catch {
    // A test that sends garbage gets no answer; the hook is not part of the product.
  }
}
