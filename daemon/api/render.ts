/** Records as the protocol shows them: `Sandbox`, `CreateSandboxResponse`; absent fields omitted, never null. */
import type { SandboxRecord } from '../store/record.js';

export function sandboxView(r: SandboxRecord): Record<string, unknown> {
  return {
    id: r.id,
    status: { state: r.state, ...(r.message ? { message: r.message } : {}), lastTransitionAt: r.lastTransitionAt },
    createdAt: r.createdAt,
    ...(r.expiresAt ? { expiresAt: r.expiresAt } : {}),
    image: { uri: r.image },
    entrypoint: r.entrypoint,
    metadata: r.metadata,
  };
}

export function createdView(r: SandboxRecord): Record<string, unknown> {
  const { image: _image, ...rest } = sandboxView(r);
  return rest;
}
