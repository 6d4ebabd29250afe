/**
 * The routes of a node's listener, in one table: actor calls (the call channel and the
 * per-message routes), membership, the observer endpoints and, in tests only, the fault hook.
 * Calls and membership are for members of this cluster only (the `x-actor-cluster` header every
 * request between nodes carries); membership, with TLS, only for peers holding a node certificate.
 * The observers are read-only resources, answered over HTTP/1.1 as well.
 */
import type http from 'node:http';
import type http2 from 'node:http2';
import type { ServerLimits } from '../core/limits.js';
import { CHANNEL_PATH } from '../core/channel.js';
import type { Listener } from '../core/listener.js';
import { SWIM_PATH } from '../core/membership.js';
import { CLUSTER_HEADER, readBody, type Transport } from '../core/transport.js';
import type { CallServer } from './calls.js';
import { serveSwim } from './gossip.js';
import { OBSERVER_PATHS } from './observed.js';
import { actorList, health, memberList, renderMetrics, type ObservedNode } from './observers.js';
import { RouteTable, refuse, respond, splitTarget, type Handler } from './route-table.js';

const POST = ['POST'];
/** Observers answer HEAD too, as any read-only HTTP resource does. */
const GET = ['GET', 'HEAD'];

/** What the routes reach of a node. */
export interface ServedNode extends ObservedNode {
  readonly cluster: string;
  readonly limits: ServerLimits;
  readonly calls: CallServer;
  readonly transport: Transport;
  readonly listener: Listener;
}

/** A read-only resource: its content type and body, made when asked for. */
type Resource = (query: URLSearchParams | undefined) => { type: string; body: string };

const JSON_TYPE = 'application/json';
/** The Prometheus text exposition format. */
const METRICS_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

function resources(node: ObservedNode): Map<string, Resource> {
  const json = (value: unknown): { type: string; body: string } => ({ type: JSON_TYPE, body: JSON.stringify(value) });
  return new Map<string, Resource>([
    [OBSERVER_PATHS.members, () => json(memberList(node))],
    [OBSERVER_PATHS.actors, (query) => json(actorList(node, query?.get('all') === 'true'))],
    [OBSERVER_PATHS.health, () => json(health(node))],
    [OBSERVER_PATHS.metrics, () => ({ type: METRICS_TYPE, body: renderMetrics(node) })],
  ]);
}

export function nodeRoutes(node: ServedNode, options: { testFaults: boolean }): RouteTable {
  const call = ({ stream, headers, path }: Parameters<Handler>[0]): void => void node.calls.serveStream(stream, headers, path);
  const table = new RouteTable()
    .on(POST, CHANNEL_PATH, inCluster(node, ({ stream }) => node.calls.openChannel(stream)))
    .under(POST, '/named/', inCluster(node, call))
    .under(POST, '/actors/', inCluster(node, call))
    .on(POST, SWIM_PATH, inCluster(node, nodesOnly(node, ({ stream }) => void serveSwim(node, stream))));
  for (const [path, resource] of resources(node)) {
    table.on(GET, path, ({ stream, query }) => {
      const { type, body } = resource(query);
      stream.respond({ ':status': 200, 'content-type': type });
      stream.end(body);
    });
  }
  if (options.testFaults) table.on(POST, '/_test/faults', ({ stream }) => void blockAddresses(node.transport, stream));
  return table;
}

/** Calls and membership come only from this cluster's members: a request naming another cluster (or none) is refused. */
function inCluster(node: ServedNode, handler: Handler): Handler {
  return (request) => {
    const named = request.headers[CLUSTER_HEADER];
    if (named === node.cluster) return handler(request);
    node.metrics.refused.inc({ reason: 'cluster' });
    const message = named === undefined ? `header ${CLUSTER_HEADER} is missing; this node is of cluster '${node.cluster}'` : `this node is of cluster '${node.cluster}', not '${String(named)}'`;
    refuse(request.stream, 403, { error: { code: 'forbidden', message } });
  };
}

/** Membership is for nodes: with TLS, a peer holding only a client certificate may read and call, never join. */
function nodesOnly(node: ServedNode, handler: Handler): Handler {
  return (request) => {
    if (node.listener.peerOf(request.stream).node) return handler(request);
    node.metrics.refused.inc({ reason: 'not-node' });
    refuse(request.stream, 403, { error: { code: 'forbidden', message: 'membership messages need a node certificate; this peer holds a client certificate' } });
  };
}

/** The observers over HTTP/1.1 (Prometheus, curl, load balancers' health checks): GET and HEAD only. */
export function http1Observers(node: ObservedNode): http.RequestListener {
  const table = resources(node);
  return (req, res) => {
    const url = splitTarget(req.url ?? '/');
    const resource = table.get(url.path);
    const answer = (status: number, type: string, body: string, extra: http.OutgoingHttpHeaders = {}): void => {
      res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body), ...extra });
      res.end(req.method === 'HEAD' ? undefined : body);
    };
    if (!resource) {
      return answer(404, JSON_TYPE, JSON.stringify({ error: { code: 'not-found', message: `no resource ${url.path} over HTTP/1.1 (the observers: ${[...table.keys()].join(', ')}); calls and membership use HTTP/2` } }));
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      return answer(405, JSON_TYPE, JSON.stringify({ error: { code: 'bad-request', message: `${req.method} not allowed on ${url.path}; use GET` } }), { allow: 'GET, HEAD' });
    }
    const { type, body } = resource(url.query);
    answer(200, type, body);
  };
}

/** The test-only fault hook: outgoing traffic to the addresses in `{block: [...]}` fails from now on. */
async function blockAddresses(transport: Transport, stream: http2.ServerHttp2Stream): Promise<void> {
  try {
    const { block } = JSON.parse((await readBody(stream, { maxBytes: 64 * 1024, limitName: 'test fault hook' })).toString('utf8')) as { block: string[] };
    transport.blocked.clear();
    for (const a of block) transport.blocked.add(a);
    respond(stream, 200, { blocked: block });
  } catch {
    // A test that sends garbage gets no answer; the hook is not part of the product.
  }
}
