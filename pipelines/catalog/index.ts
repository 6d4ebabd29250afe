/**
 * The directory service as `serve --catalog-config FILE` uses it: the ACL file read once at start,
 * the libraries to mount (each under its own name), and the fastify plugin with the service's
 * routes (plugin.ts). The server registers it as
 *
 *   const catalog = openCatalog(file);
 *   for (const { name, location } of catalog.libraries) mount(name, location);
 *   await app.register(catalog.plugin, catalog.pluginOptions);
 */
import type { FastifyPluginAsync } from 'fastify';
import type { DatasetLocation } from '../pins/resolve.js';
import { libraryOf, loadAcl } from './acl.js';
import { catalogPlugin, type CatalogPluginOptions } from './plugin.js';
import { dirname } from 'node:path';

export interface CatalogLibrary {
  name: string;
  location: DatasetLocation;
}

export interface Catalog {
  libraries: CatalogLibrary[];
  plugin: FastifyPluginAsync<CatalogPluginOptions>;
  pluginOptions: CatalogPluginOptions;
}

export function openCatalog(path: string, options: Omit<CatalogPluginOptions, 'acl'> = {}): Catalog {
  const acl = loadAcl(path);
  const libraries = [...acl.datasets].map(([name, entry]): CatalogLibrary => {
    const library = libraryOf(name, entry, dirname(acl.path));
    const display = `catalog:${name}`;
    if (library.kind === 'local') return { name, location: { kind: 'local', path: library.path, display } };
    const { uri, bucket, prefix, endpoint, region, credentials } = library;
    return { name, location: { kind: 's3', uri, bucket, prefix, region, display, ...(endpoint !== undefined ? { endpoint } : {}), ...(credentials ? { credentials } : {}) } };
  });
  return { libraries, plugin: catalogPlugin, pluginOptions: { acl, ...options } };
}
