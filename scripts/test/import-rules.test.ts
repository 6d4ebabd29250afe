/**
 * The layering of ARCHITECTURE.md, checked on the repository's sources (scripts/imports.ts): one-way
 * imports, engines reached through their entry modules, lib/ at the bottom, no cycles. The reader
 * itself is tested on small sources, so a rule cannot pass because imports were not seen.
 */
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DIST_ROOT } from '../../lib/testing/run-tool.js';
import { cycles, importGraph, importSpecifiers, layeringProblems, type ImportEdge } from '../imports.js';

const REPO = join(DIST_ROOT, '..');

test('the reader finds static, type-only, re-export and dynamic imports, and nothing in comments, strings or regexes', () => {
  const source = [
    "import { a } from './a.js';",
    "import type { B } from '../b.js';",
    "import './side-effect.js';",
    "export { c } from './c.js';",
    "export * from './d.js';",
    '// import { fake } from "./comment.js";',
    "/* import x from './block.js' */",
    "const text = \"import y from './string.js'\";",
    "const re = /['\"]/g;",
    "const t = `import z from './template.js' ${'x'}`;",
    "export { local };",
    "async function f() { return import('./lazy.js'); }",
    "const g = await import(\n  './lazy2.js'\n);",
  ].join('\n');
  assert.equal(
    importSpecifiers(source).map((s) => `${s.kind} ${s.spec} ${s.line}`),
    ['static ./a.js 1', 'static ../b.js 2', 'static ./side-effect.js 3', 'static ./c.js 4', 'static ./d.js 5', 'dynamic ./lazy.js 12', 'dynamic ./lazy2.js 14'],
  );
});

test('the rules catch what they are about', () => {
  const edge = (from: string, to: string, kind: ImportEdge['kind'] = 'static'): ImportEdge => ({ from, to, kind, line: 1 });
  const problems = layeringProblems([
    edge('pipelines/search/find.ts', 'cli/kit/flags.ts'),
    edge('lib/output.ts', 'pipelines/index.ts'),
    edge('cli/trajstore/find.ts', 'pipelines/search/find.ts'),
    edge('framework/core/system.ts', 'pipelines/dataset/open.ts'),
    edge('pipelines/search/find.ts', 'pipelines/index.ts'),
    edge('pipelines/a.ts', 'pipelines/b.ts'),
    edge('pipelines/b.ts', 'pipelines/a.ts'),
    edge('pipelines/index.ts', 'pipelines/a.ts', 'dynamic'),
    edge('pipelines/test/x.test.ts', 'pipelines/search/find.ts'),
  ]);
  assert.equal(problems, [
    'pipelines/search/find.ts:1 imports cli/kit/flags.ts: only cli/ may import cli/',
    'lib/output.ts:1 imports pipelines/index.ts: lib/ imports no area',
    'cli/trajstore/find.ts:1 imports pipelines/search/find.ts: cli/ reaches pipelines/ only through pipelines/index.ts',
    'framework/core/system.ts:1 imports pipelines/dataset/open.ts: one engine reaches another only through its entry module pipelines/index.ts',
    'pipelines/search/find.ts:1 imports pipelines/index.ts: the insides of pipelines/ do not import its own entry module',
    'import cycle: pipelines/a.ts -> pipelines/b.ts -> pipelines/a.ts',
  ]);
  assert.equal(cycles([edge('x.ts', 'x.ts')]), [['x.ts', 'x.ts']]);
});

test('the repository keeps the layering: one-way imports, engines through their entry modules, no cycles', () => {
  const edges = importGraph(REPO);
  assert.ok(edges.length > 300, `read ${edges.length} imports`);
  assert.ok(edges.some((e) => e.from === 'cli/trajstore/find.ts' && e.to === 'pipelines/index.ts'), 'the reader sees the CLI reach the engine');
  assert.equal(layeringProblems(edges), []);
});

test.run();
