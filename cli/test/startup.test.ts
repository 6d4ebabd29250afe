/**
 * The tools start fast: loading a tool and its command specs (which is all `--help` does) loads the
 * command line, lib/, each engine's entry module and the few leaf modules of constants that entry
 * re-exports, and nothing of the engines' work, which each entry module loads when an operation
 * runs. A new static import of a heavy module fails here, naming the module.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { EXPORT_FORMATS, FIND_DEFAULTS, QUERY_DEFAULTS, REPORTS, SYNC_DEFAULTS } from '../../pipelines/index.js';
import { DIST_ROOT, runTool, type ToolResult } from '../../lib/testing/run-tool.js';

/** Engine entry modules, and the leaf modules of constants they re-export for --help. */
const LIGHT_MODULES = [
  'pipelines/index.js',
  'pipelines/formats/registry.js',
  'pipelines/pins/pins.js',
  'pipelines/export/formats.js',
  'pipelines/search/limits.js',
  'pipelines/dataset/defaults.js',
  'pipelines/sync/defaults.js',
  'pipelines/serve/gateway/defaults.js',
  'pipelines/stats/reports.js',
  'pipelines/agent/names.js',
  'pipelines/onboard/sections.js',
  // serve's mount names and its loopback check of listener addresses, run while reading its flags.
  'pipelines/serve/names.js',
  'pipelines/serve/address.js',
  'daemon/index.js',
  'daemon/images/paths.js',
  'daemon/listen.js',
  'framework/index.js',
  'framework/core/address.js',
  'framework/core/errors.js',
  'framework/core/members.js',
  'framework/core/limits.js',
  'framework/node/inspect-types.js',
  'framework/loadgen/types.js',
];
/** The argument parser is the one package a tool needs before a command runs. */
const LIGHT_PACKAGES = ['cac'];

const scratch = mkdtempSync(join(tmpdir(), 'cli-startup-'));
/** esbuild names inputs relative to the directory it ran in: the repository. */
const REPO_ROOT = join(DIST_ROOT, '..');
const recorder = pathToFileURL(join(DIST_ROOT, 'lib', 'testing', 'record-modules.js')).href;

/** Runs a tool and returns what it printed and the modules it loaded (paths under dist/, or `node_modules/<package>`). */
async function runRecorded(tool: string, args: string[]): Promise<{ result: ToolResult; modules: string[] }> {
  const file = join(scratch, `${tool}-${args.join('_').replace(/\W/g, '')}.txt`);
  // The compiled entry module, not the start-up bundle: here the modules it loads are still told apart.
  const result = await runTool(`cli/${tool}.js`, args, { env: { NODE_OPTIONS: `--import=${recorder}`, RECORD_MODULES_TO: file } });
  const modules = readFileSync(file, 'utf8')
    .split('\n')
    .filter((url) => url.startsWith('file:'))
    .map((url) => relative(DIST_ROOT, fileURLToPath(url)))
    // A package is named by its folder under any node_modules (a checkout may link node_modules elsewhere).
    .map((path) => path.replace(/^(?:.*\/)?node_modules\/((?:@[^/]+\/)?[^/]+).*$/, 'node_modules/$1'));
  return { result, modules: [...new Set(modules)] };
}

/** What a tool loaded that is neither cli/ (outside the tests) nor lib/ nor listed as light. */
function heavy(modules: string[]): string[] {
  return modules.filter(
    (m) =>
      !(m.startsWith('cli/') && !m.startsWith('cli/test/')) &&
      !m.startsWith('lib/') &&
      !LIGHT_MODULES.includes(m) &&
      !LIGHT_PACKAGES.some((p) => m === `node_modules/${p}`),
  );
}

for (const tool of ['trajstore', 'actorctl', 'sandboxd']) {
  test(`${tool} --help loads no business module`, async () => {
    const { result, modules } = await runRecorded(tool, ['--help']);
    assert.is(result.code, 0, result.stderr);
    assert.match(result.stdout, 'Commands:');
    assert.ok(modules.includes(`cli/${tool}.js`), 'the recorder saw the tool itself');
    assert.equal(heavy(modules), []);
  });
}

test('actorctl actor CLASS --help loads the class to list its constructor parameters', async () => {
  const { result, modules } = await runRecorded('actorctl', ['actor', 'framework.examples.Echo', '--help']);
  assert.is(result.code, 0, result.stderr);
  assert.match(result.stdout, /-- --prefix <string>\s+Echo constructor parameter/);
  // The check above is not vacuous: here the recorder does see a business module.
  assert.ok(heavy(modules).includes('framework/core/loader.js'), heavy(modules).join(', '));
});

test('help states the defaults and choices of the pipelines it does not load', async () => {
  const help = async (args: string[]): Promise<string> => {
    const r = await runTool('trajstore', [...args, '--help']);
    assert.is(r.code, 0, r.stderr);
    return r.stdout;
  };
  const find = await help(['find']);
  assert.match(find, `matches to return at most (default ${FIND_DEFAULTS.maxResults})`);
  assert.match(find, `bytes of preview per match (default ${FIND_DEFAULTS.maxPreviewBytes})`);
  assert.match(await help(['query']), `(default ${QUERY_DEFAULTS.maxOutputRows})`);
  assert.match(await help(['export']), EXPORT_FORMATS.join('|'));
  assert.match(await help(['sync']), `(default ${SYNC_DEFAULTS.intervalMs / 1000}s)`);
  const top = await help([]);
  assert.match(top, `\`stats ${REPORTS.join('|')}\` for reports`);
  for (const report of REPORTS) assert.match(top, `stats ${report} [dataset]`);
});

test('the start-up bundles hold the command line and the engines\' entry modules, and none of their work', () => {
  const meta = JSON.parse(readFileSync(join(DIST_ROOT, 'bin', 'meta.json'), 'utf8')) as { startup: { outputs: Record<string, { entryPoint?: string; inputs: Record<string, unknown> }> } };
  const bundles = Object.values(meta.startup.outputs).filter((o) => o.entryPoint !== undefined);
  assert.is(bundles.length, 3, 'one start-up bundle per tool');
  for (const bundle of bundles) {
    const inputs = Object.keys(bundle.inputs)
      .filter((path) => !path.startsWith('builtin:'))
      .map((path) => relative(DIST_ROOT, join(REPO_ROOT, path)).replace(/^\.\.\/node_modules\/((?:@[^/]+\/)?[^/]+).*$/, 'node_modules/$1'));
    assert.ok(inputs.includes(relative(DIST_ROOT, join(DIST_ROOT, bundle.entryPoint as string))) || inputs.some((i) => i.startsWith('cli/')), `${bundle.entryPoint}: the bundle holds its command line`);
    assert.equal(heavy([...new Set(inputs)]), [], `${bundle.entryPoint} bundles no engine work`);
  }
});

/**
 * Built-ins that cost milliseconds to load (child_process, net and readline pull in Node's streams, sockets and
 * timers): every command would pay for them before its work starts. Code that needs one imports it
 * dynamically where it is used (the pager, onboard's prompts), and the bundler keeps such imports dynamic.
 */
const HEAVY_BUILTINS = ['node:child_process', 'node:net', 'node:readline', 'node:readline/promises', 'node:http', 'node:http2', 'node:https', 'node:tls', 'node:crypto', 'node:stream', 'node:worker_threads', 'node:zlib'];

test('the start-up bundles import no heavy built-in', () => {
  const meta = JSON.parse(readFileSync(join(DIST_ROOT, 'bin', 'meta.json'), 'utf8')) as { startup: { outputs: Record<string, { entryPoint?: string; inputs: Record<string, unknown> }> } };
  for (const bundle of Object.values(meta.startup.outputs).filter((o) => o.entryPoint !== undefined)) {
    const builtins = Object.keys(bundle.inputs).filter((path) => path.startsWith('builtin:')).map((path) => path.slice('builtin:'.length));
    assert.ok(builtins.includes('node:fs'), `${bundle.entryPoint}: the bundle's built-ins are listed`);
    assert.equal(builtins.filter((name) => HEAVY_BUILTINS.includes(name)), [], `${bundle.entryPoint} loads them at start-up`);
  }
});

test.after(() => rmSync(scratch, { recursive: true, force: true }));

test.run();
