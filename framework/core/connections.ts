/**
 * The node's open connections and how long each has been quiet (no byte received). At the cap
 * (limits.max_connections) a new connection takes the place of the one quiet the longest, and an
 * HTTP/2 connection with no stream open that stays quiet for the idle timeout is closed (GOAWAY).
 * Without either, a client holding max_connections silent connections kept every other client and
 * every peer out for as long as it liked. A client that works is never pushed out by new ones.
 *
 * Quiet means asking nothing of the node, not sending nothing: over HTTP/2 only streams opened or
 * closed and the bytes of what streams carry count (`work`). PING, SETTINGS, WINDOW_UPDATE and
 * frames of unknown types cost a client nothing to send; counted as bytes, a few a second kept a
 * connection that never asked for anything in its place for good, and max_connections of them
 * kept everyone out.
 */
import type http2 from 'node:http2';
import type net from 'node:net';

export interface Connection {
  readonly socket: net.Socket;
  /** Set once the connection speaks HTTP/2. */
  session: http2.ServerHttp2Session | undefined;
  /** Streams open on the session: a session with one open is not idle, however quiet. */
  streams: number;
  /** Streams opened and closed so far. */
  streamEvents: number;
  /**
   * How much has been asked of the node so far, a count that only grows: the bytes received until
   * the connection speaks HTTP/2 (its preface, or an HTTP/1.1 request), then what `work` says.
   */
  work: () => number;
  /** When `work` last grew (as of the last look at it). */
  quietSince: number;
  worked: number;
}

/** A connection quiet at least this long may make room for a new one. */
const EVICT_QUIET_MS = 1_000;
/** How often quietness is looked at. */
const LOOK_EVERY_MS = 1_000;

export class ConnectionTable {
  private readonly open = new Map<net.Socket, Connection>();
  private readonly looker: NodeJS.Timeout;

  constructor(
    private readonly max: number,
    private readonly idleMs: number,
    private readonly evicted: (connection: Connection) => void,
  ) {
    this.looker = setInterval(() => this.closeIdle(), Math.min(LOOK_EVERY_MS, idleMs));
    this.looker.unref();
  }

  get size(): number {
    return this.open.size;
  }

  sockets(): IterableIterator<net.Socket> {
    return this.open.keys();
  }

  /** Takes a place for `socket`, first evicting the connection quiet the longest when at the cap; undefined when every one is busy. */
  admit(socket: net.Socket): Connection | undefined {
    if (this.open.size >= this.max && !this.evictQuietest()) return undefined;
    const connection: Connection = { socket, session: undefined, streams: 0, streamEvents: 0, work: () => socket.bytesRead, quietSince: Date.now(), worked: 0 };
    this.open.set(socket, connection);
    socket.once('close', () => this.open.delete(socket));
    return connection;
  }

  /** A stream opened on the connection: it is not idle until the stream closes. */
  streamOpened(connection: Connection, stream: http2.ServerHttp2Stream): void {
    connection.streams++;
    connection.streamEvents++;
    stream.once('close', () => {
      connection.streams--;
      connection.streamEvents++;
    });
  }

  stop(): void {
    clearInterval(this.looker);
  }

  private refresh(connection: Connection, now: number): void {
    const worked = connection.work();
    if (worked === connection.worked) return;
    connection.worked = worked;
    connection.quietSince = now;
  }

  private evictQuietest(): boolean {
    const now = Date.now();
    let quietest: Connection | undefined;
    for (const connection of this.open.values()) {
      this.refresh(connection, now);
      if (now - connection.quietSince < EVICT_QUIET_MS) continue;
      if (!quietest || connection.quietSince < quietest.quietSince) quietest = connection;
    }
    if (!quietest) return false;
    this.open.delete(quietest.socket);
    this.evicted(quietest);
    if (quietest.session) quietest.session.destroy();
    else quietest.socket.destroy();
    return true;
  }

  private closeIdle(): void {
    const now = Date.now();
    for (const connection of this.open.values()) {
      this.refresh(connection, now);
      const { session } = connection;
      if (session && !session.closed && connection.streams === 0 && now - connection.quietSince >= this.idleMs) session.close();
    }
  }
}
