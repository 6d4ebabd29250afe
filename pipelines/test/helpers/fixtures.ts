/** Where the shared trajectory fixtures are: `../shared/fixtures` beside the repository. */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root (tests run from `dist/pipelines/test/`). */
export const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..');
export const SHARED_FIXTURES = join(REPO_ROOT, '..', 'shared', 'fixtures');
export const PROJECT_TESTDATA = join(REPO_ROOT, 'testdata');
