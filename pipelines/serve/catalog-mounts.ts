/**
 * `serve --catalog-config FILE`: the directory file's libraries become the server's mounts, and its
 * directory service (tickets, the datasets a user is granted) is served beside the API.
 */
import type { FastifyInstance } from 'fastify';
import { openCatalog } from '../catalog/index.js';
import { MOUNT_NAME } from '../search/sql/connection.js';
import type { MountSpec } from './mounts.js';
import { RESERVED_SERVE_NAMES } from './names.js';

export interface CatalogServing {
  mounts: MountSpec[];
  /** Libraries the web interface and API do not show, and why (the directory service still serves them). */
  unmounted: { name: string; reason: string }[];
  /** Registers the directory service's routes on the server. */
  extend: (app: FastifyInstance) => Promise<void>;
}

export function catalogServing(aclPath: string): CatalogServing {
  const catalog = openCatalog(aclPath);
  const mounts: MountSpec[] = [];
  const unmounted: CatalogServing['unmounted'] = [];
  for (const { name, location } of catalog.libraries) {
    // Object-store datasets are opened by the clients the tickets are for; the server's own mounts are local.
    if (location.kind !== 'local') unmounted.push({ name, reason: 'an object-store library is served to ticket holders only' });
    else if (!MOUNT_NAME.test(name) || RESERVED_SERVE_NAMES.has(name)) unmounted.push({ name, reason: 'its name is not a mount name (a letter or _ then letters, digits or _)' });
    else mounts.push({ name, dataset: location.path });
  }
  return {
    mounts,
    unmounted,
    extend: async (app) => {
      await app.register(catalog.plugin, catalog.pluginOptions);
    },
  };
}
