/**
 * Makes the project's tiny model, `dist/models/tiny.gguf` (run by scripts/setup.sh and `npm run
 * build`): a small llama-architecture GGUF fitted on the in-repo corpus, the same bytes every run.
 * Nothing is written when the file is already up to date.
 *
 *   node dist/scripts/tiny-model.js
 */
import { makeTinyModel } from '../framework/index.js';

const { path, written } = await makeTinyModel();
process.stderr.write(`tiny model: ${path} (${written ? 'written' : 'up to date'})\n`);
