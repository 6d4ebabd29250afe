/**
 * The read operations, loaded together by the engine's entry module (index.ts): they share the
 * code that opens a dataset and runs SQL on its index, and a command loads them in one piece.
 */
export { findInDataset } from './search/find.js';
export { runQuery } from './search/query.js';
export { listSources } from './list/index.js';
export { datasetHealth, statsReport } from './stats/index.js';
export { showTranscript } from './show/transcript.js';
