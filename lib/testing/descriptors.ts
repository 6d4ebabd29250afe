/** Tests of what a process does at its open-file limit: start it under a limit, flood it with held connections, count its descriptors, talk to it over a connection opened before. */
import { readdirSync } from 'node:fs';
import { request, type Agent } from 'node:http';
import { connect, type Socket } from 'node:net';

/** A command prefix that runs what follows it under `ulimit -n nofile` (soft and hard); the shell execs it, so the child's pid is its own. */
export function underOpenFileLimit(nofile: number): string[] {
  return ['/bin/sh', '-c', 'ulimit -n "$0" && exec "$@"', String(nofile)];
}

/** How many descriptors process `pid` has open. */
export function openDescriptors(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

/** `count` connections to 127.0.0.1:`port` that send nothing and are held until `release`. */
export function holdConnections(port: number, count: number): { release(): void } {
  const sockets: Socket[] = [];
  for (let i = 0; i < count; i++) sockets.push(connect(port, '127.0.0.1').on('error', () => undefined));
  return { release: () => sockets.forEach((s) => s.destroy()) };
}

/** The most descriptors `pid` had open, sampled every 20 ms until `stop`. */
export function sampleDescriptors(pid: number): { stop(): number } {
  let most = 0;
  const timer = setInterval(() => (most = Math.max(most, openDescriptors(pid))), 20);
  return {
    stop: () => {
      clearInterval(timer);
      return Math.max(most, openDescriptors(pid));
    },
  };
}

/**
 * One request over `agent` (a `keepAlive` Agent with `maxSockets: 1`): once a first request has
 * opened its connection, later ones travel on it, as a client's did that was connected before a flood.
 */
export function requestOn(agent: Agent, url: string, method = 'GET', headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, agent, headers }, (res) => {
      let text = '';
      res.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    req.end();
  });
}
