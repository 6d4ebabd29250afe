/**
 * A node's listener: one port carrying HTTP/2 (calls, membership, observers) and HTTP/1.1 (the
 * read-only observer resources, so that Prometheus and curl can read `/metrics` and `/health`).
 * HTTP/2 opens every connection with a fixed preface, so the first bytes tell the two apart; over
 * TLS the same check runs on the decrypted bytes (ALPN offers h2 and http/1.1). With TLS every
 * peer must present a certificate the cluster CA signed (and, when it names a cluster, ours).
 *
 * What clients can make the node hold is bounded: open connections, concurrent streams per
 * connection, the time to finish a request, and (budget.ts) the bytes of call bodies per
 * connection and in all.
 */
import http from 'node:http';
import http2 from 'node:http2';
import net, { type AddressInfo } from 'node:net';
import tls from 'node:tls';
import { parseAddr } from './address.js';
import { ConnectionBudget, NodeBudget } from './budget.js';
import { STREAM_WINDOW_BYTES } from './channel.js';
import { ConnectionTable, type Connection } from './connections.js';
import { RESET_BURST_SECONDS, type ServerLimits } from './limits.js';
import { peerClusterProblem, peerIsNode, type TlsMaterial } from './tls.js';
import { raiseSessionWindow } from './transport.js';

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

/** Bytes of membership messages one connection, and the node, may hold at once. */
export const SWIM_CONNECTION_BYTES = 4 * 1024 * 1024;
const SWIM_NODE_BYTES = 16 * 1024 * 1024;

export type StreamHandler = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => void;

export interface ListenerOptions {
  addr: string;
  limits: ServerLimits;
  /** Mutual TLS: peers need a certificate of the CA in `material`, and one naming `cluster` if it names any. */
  tls?: { material: TlsMaterial; cluster: string } | undefined;
  onStream: StreamHandler;
  onHttp1: http.RequestListener;
  /**
   * A connection was refused (`tls`: its handshake failed; `cluster`: its certificate is another
   * cluster's; `connections`: as many as may be are open and busy) or closed to make room for a new
   * one (`evicted`: it was the quietest at the cap).
   */
  refused(reason: 'tls' | 'cluster' | 'connections' | 'evicted', message: string): void;
}

/** What a node knows of the client on the other end of a connection. */
export interface Peer {
  /** What this connection's call bodies may hold. */
  budget: ConnectionBudget;
  /**
   * What its membership messages may hold: a budget of their own, so that callers filling the
   * call budget cannot stop a node answering probes (it would be declared Suspect, then Failed).
   */
  swimBudget: ConnectionBudget;
  /**
   * Unread bytes of streamed items its call channels may have out, all streams together: as much as
   * one channel running limits.max_streams streams with full windows (a node uses one channel per
   * peer). Its own count, not the node's: a reader that stops holds back only its own producers.
   */
  streamWindow: ConnectionBudget;
  /** False for a TLS client whose certificate is a client certificate: it may read and call, not join. */
  node: boolean;
}

export class Listener {
  private readonly server: net.Server;
  private readonly h2: http2.Http2Server;
  private readonly h1: http.Server;
  /** Each session's client, and its place in the connection table (none for a session made without one). */
  private readonly sessionsOf = new WeakMap<http2.Http2Session, { peer: Peer; connection?: Connection }>();
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private readonly table: ConnectionTable;
  /** Set while a connection is handed to the HTTP/2 server, whose 'session' event comes synchronously. */
  private arriving: { peer: Peer; connection: Connection } | undefined;
  readonly budget: NodeBudget;
  /** Membership messages in all: a few whole member tables. */
  readonly swimBudget = new NodeBudget(SWIM_NODE_BYTES);

  private constructor(private readonly options: ListenerOptions) {
    const { limits } = options;
    this.budget = new NodeBudget(limits.maxNodeBytes);
    this.table = new ConnectionTable(limits.maxConnections, limits.bodyTimeoutMs, (c) =>
      options.refused('evicted', `closed the connection from ${c.socket.remoteAddress}, quiet the longest, to make room: ${limits.maxConnections} are open (limit max_connections)`),
    );
    this.h2 = http2.createServer({
      settings: { maxConcurrentStreams: limits.maxStreams },
      streamResetRate: limits.maxResetsPerSecond,
      streamResetBurst: limits.maxResetsPerSecond * RESET_BURST_SECONDS,
    });
    this.h2.on('stream', (stream, headers) => {
      // A peer that resets or breaks its stream must never take the node down.
      stream.on('error', () => {});
      // Node announces a stream a tick after its headers came: the session may be gone by then (its
      // peer closed the connection), and with it the peer the routes look up; nobody is left to answer.
      if (!stream.session) return void stream.destroy();
      const connection = this.sessionsOf.get(stream.session)?.connection;
      if (connection) this.table.streamOpened(connection, stream);
      options.onStream(stream, headers);
    });
    this.h2.on('session', (session) => {
      if (this.arriving) this.arriving.connection.session = session;
      this.sessionsOf.set(session, this.arriving ?? { peer: this.newPeer(true) });
      this.sessions.add(session);
      session.on('error', () => {});
      raiseSessionWindow(session);
      session.once('close', () => this.sessions.delete(session));
    });
    // Broken frames after a good preface: nghttp2 answers GOAWAY; we keep serving.
    this.h2.on('sessionError', () => {});
    this.h1 = http.createServer({ requestTimeout: limits.bodyTimeoutMs, headersTimeout: limits.bodyTimeoutMs }, options.onHttp1);
    this.h1.on('clientError', (_error, socket) => socket.destroy());
    if (options.tls) {
      const { material, cluster } = options.tls;
      const server = tls.createServer({ ...material, requestCert: true, rejectUnauthorized: true, ALPNProtocols: ['h2', 'http/1.1'] });
      server.on('secureConnection', (socket) => {
        const problem = peerClusterProblem(socket.getPeerX509Certificate()?.subjectAltName, cluster);
        if (problem) {
          options.refused('cluster', `refused a TLS peer ${socket.remoteAddress}: ${problem}`);
          return void socket.destroy();
        }
        this.accept(socket, peerIsNode(socket));
      });
      server.on('tlsClientError', (error: NodeJS.ErrnoException, socket) => {
        // OpenSSL's messages run over several lines of internals; its code says it (ERR_SSL_PEER_DID_NOT_RETURN_A_CERTIFICATE).
        options.refused('tls', `refused a TLS connection from ${socket.remoteAddress}: ${error.code ?? error.message.split('\n')[0]}`);
        socket.destroy();
      });
      this.server = server;
    } else {
      this.server = net.createServer((socket) => this.accept(socket, true));
    }
    // The table keeps the cap, evicting the quietest connection to make room; this backstop bounds
    // what may arrive at once (and, with TLS, be in its handshake) before the table sees it.
    this.server.maxConnections = 2 * limits.maxConnections;
    this.server.on('drop', (data) => options.refused('connections', `refused a connection from ${data?.remoteAddress}: ${this.server.maxConnections} are open or arriving (twice limit max_connections)`));
    this.server.on('error', () => {});
  }

  static async open(options: ListenerOptions): Promise<Listener> {
    const listener = new Listener(options);
    const { host, port } = parseAddr(options.addr);
    await new Promise<void>((resolve, reject) => {
      listener.server.once('error', reject);
      listener.server.listen(port, host, () => {
        listener.server.off('error', reject);
        resolve();
      });
    });
    return listener;
  }

  address(): AddressInfo {
    return this.server.address() as AddressInfo;
  }

  private newPeer(node: boolean): Peer {
    const { limits } = this.options;
    return {
      budget: new ConnectionBudget(limits.maxConnectionBytes, this.budget),
      swimBudget: new ConnectionBudget(SWIM_CONNECTION_BYTES, this.swimBudget),
      streamWindow: new ConnectionBudget(limits.maxStreams * STREAM_WINDOW_BYTES, new NodeBudget(Infinity)),
      node,
    };
  }

  /** Connections open now (both protocols). */
  get connections(): number {
    return this.table.size;
  }

  /** The client of a stream's connection. */
  peerOf(stream: http2.ServerHttp2Stream): Peer {
    return this.sessionsOf.get(stream.session!)!.peer;
  }

  /** Reads the first bytes to tell HTTP/2 from HTTP/1.1, then hands the connection (bytes put back) to that server. */
  private accept(socket: net.Socket, node: boolean): void {
    socket.on('error', () => {});
    const connection = this.table.admit(socket);
    if (!connection) {
      this.options.refused('connections', `refused a connection from ${socket.remoteAddress}: ${this.options.limits.maxConnections} are open and busy (limit max_connections)`);
      return void socket.destroy();
    }
    // A connection that says nothing is dropped instead of holding one of the places.
    socket.setTimeout(this.options.limits.bodyTimeoutMs, () => socket.destroy());
    let seen: Buffer = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      seen = seen.length ? Buffer.concat([seen, chunk]) : chunk;
      const n = Math.min(seen.length, PREFACE.length);
      const h2 = seen.subarray(0, n).equals(PREFACE.subarray(0, n));
      if (h2 && seen.length < PREFACE.length) return;
      socket.off('data', onData);
      socket.pause();
      socket.setTimeout(0);
      socket.unshift(seen);
      if (!h2) {
        this.h1.emit('connection', socket);
        // The HTTP/1.1 parser reads new bytes from the socket itself; the ones put back reach it as 'data'.
        return void socket.resume();
      }
      const peer = this.newPeer(node);
      // From now on only requests count as work, not control frames (connections.ts).
      connection.work = () => connection.streamEvents + peer.budget.taken + peer.swimBudget.taken + peer.streamWindow.taken;
      this.arriving = { peer, connection };
      try {
        this.h2.emit('connection', socket);
      } finally {
        this.arriving = undefined;
      }
    };
    socket.on('data', onData);
  }

  /** Stops accepting, lets sessions finish their streams for up to a second, then cuts them. */
  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.table.stop();
    for (const session of this.sessions) session.close();
    this.h1.closeIdleConnections();
    const force = setTimeout(() => {
      for (const session of this.sessions) session.destroy();
      for (const socket of [...this.table.sockets()]) socket.destroy();
    }, 1000);
    await closed;
    clearTimeout(force);
  }
}

/** A plain HTTP/1.1 listener (the observers at `metricsAddr`). */
export async function openHttp1(addr: string, handler: http.RequestListener): Promise<http.Server> {
  const { host, port } = parseAddr(addr);
  const server = http.createServer(handler);
  server.on('clientError', (_error, socket) => socket.destroy());
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return server;
}
