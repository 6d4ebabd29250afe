/**
 * The write operations, loaded together by the engine's entry module (index.ts): import, export
 * and drop share the dataset layout, the Parquet parts and the formats.
 */
export { planImport, runImportPlan } from './import/plan.js';
export { runExport } from './export/export.js';
export { checkDropTarget, dropDataset } from './drop/index.js';
export { planSync, runSync } from './sync/index.js';
export { loadConfig } from './pins/config.js';
