/**
 * The web interface: the files the build bundled (scripts/bundle.ts: dist/bin/web/), read once at
 * start and served from memory. Nothing refers to anything off this server. Paths that are not an
 * asset or the API get the page itself, so that the interface's own addresses (#/...) reload.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { extname, join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { UnavailableError } from '../../../lib/errors.js';
import { errorBody } from '../errors.js';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
};

export function webRoutes(app: FastifyInstance, webRoot: string): void {
  let files: Map<string, Buffer>;
  try {
    files = new Map(readdirSync(webRoot).filter((f) => TYPES[extname(f)]).map((f) => [f, readFileSync(join(webRoot, f))]));
  } catch (error) {
    throw new UnavailableError(`${webRoot}: the web interface is not built`, { hint: 'run `npm run build`', cause: error });
  }
  const page = files.get('index.html');
  if (!page) throw new UnavailableError(`${webRoot}/index.html: the web interface is not built`, { hint: 'run `npm run build`' });
  // No framing (another site's page cannot overlay it), no <base> or form that sends elsewhere.
  const headers = {
    'content-security-policy': "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    'x-frame-options': 'DENY',
    'x-content-type-options': 'nosniff',
  };
  app.get('/', (_req, reply) => reply.headers(headers).type(TYPES['.html'] as string).send(page));
  app.get<{ Params: { file: string } }>('/assets/:file', (req, reply) => {
    const body = files.get(req.params.file);
    if (!body) return reply.code(404).send(errorBody(404, 'not_found', `no asset ${JSON.stringify(req.params.file)}`));
    return reply.headers({ ...headers, 'cache-control': 'no-cache' }).type(TYPES[extname(req.params.file)] as string).send(body);
  });
}
