/**
 * The optional load-generator module behind `actorctl bench`, which imports this file
 * dynamically (and its types only statically, so it runs without the module).
 */
export { renderReportTable, runBenchmark } from './run.js';
export type * from './types.js';
