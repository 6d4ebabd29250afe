/**
 * The tools as bundles: a command should not pay for resolving and loading a hundred modules (and
 * better-sqlite3's fifteen) one file at a time before it starts its work.
 *
 *   node dist/scripts/bundle.js        (run by `npm run build` after tsc)
 *
 * Two builds, writing to dist/bin/:
 * - the start-up bundles `<tool>.main.js`: each tool's command line (cli/, lib/, the engine's entry
 *   module, cac) in one file. The operations an entry module loads lazily stay lazy: their
 *   `import()` points at the operations build;
 * - the operations build `ops/`: every module loaded lazily (by a start-up bundle, or by an
 *   operation: a format's decoder, the index builder) is an entry of its own, named by its path in
 *   dist/ (`ops/pipelines~reading.js`) and holding what it imports, so that an operation is one file
 *   to load. Entries may hold copies of the same module; they are only ever loaded one beside
 *   another through lazy imports, and share nothing but lib/errors.js.
 * lib/errors.js is left out of both and loaded from dist/lib/ by both, so that an error thrown by
 * an operation is an instance of the classes the command line checks for.
 *
 * Each tool's executable `<tool>.js` turns on Node's compile cache (in dist/bin/.compile-cache)
 * and imports its bundle, so that it is compiled once, not on every command.
 * - the web interface of `trajstore serve` in `web/`: its page, style sheets and one browser
 *   bundle (the views, uPlot), so that the page loads nothing from anywhere but the server.
 * `meta.json` is esbuild's account of what went where (tests check the start-up bundles hold
 * nothing of the engines' work). Worker threads and native parts stay where tsc and
 * scripts/build-native.sh put them in dist/ (lib/install.ts `distPath`).
 */
import { build, type BuildOptions, type Plugin } from 'esbuild';
import { chmodSync, copyFileSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const DIST = join(dirname(fileURLToPath(import.meta.url)), '..');
const OUT = join(DIST, 'bin');
const OPS = join(OUT, 'ops');
const ERRORS = join(DIST, 'lib', 'errors.js');
export const TOOLS = ['trajstore', 'actorctl', 'sandboxd'] as const;

const posix = (path: string): string => path.split('\\').join('/');
/** An import specifier from a file in `from` (a directory) to `to`. */
const specifier = (from: string, to: string): string => {
  const path = posix(relative(from, to));
  return path.startsWith('.') ? path : `./${path}`;
};

/**
 * Node built-ins through `process.getBuiltinModule`, not `import`: an ES module import of a built-in
 * goes through a facade that reads every export, and for node:fs that loads its promises API, its
 * streams and readline, which most commands never need. Each built-in becomes one small ES module
 * that exports its plain properties by name (read once); as a CommonJS shim it was wrapped again at
 * every importing module, a getter per property (about 2 ms of every command, measured). Lazy
 * properties (getters such as `fs.promises`) are left out, so they stay unloaded.
 */
const builtinsWithoutFacade: Plugin = {
  name: 'builtins-without-facade',
  setup(esbuild) {
    // A CommonJS `require` of a built-in gets the module itself (node:assert is a function, which fastify calls).
    // A dynamic `import()` of one stays a dynamic import: code loads a built-in lazily (child_process for
    // the pager, readline for a prompt) so that commands which never reach it do not pay for it.
    esbuild.onResolve({ filter: /^node:/ }, (args) =>
      args.kind === 'dynamic-import' ? { path: args.path, external: true } : { path: args.path, namespace: args.kind === 'require-call' ? 'builtin-cjs' : 'builtin' },
    );
    esbuild.onLoad({ filter: /.*/, namespace: 'builtin-cjs' }, (args) => ({ contents: `module.exports = process.getBuiltinModule(${JSON.stringify(args.path)});`, loader: 'js' }));
    esbuild.onLoad({ filter: /.*/, namespace: 'builtin' }, (args) => {
      const module = process.getBuiltinModule(args.path) as Record<string, unknown>;
      const names = Object.keys(module).filter((name) => /^[A-Za-z_$][\w$]*$/.test(name) && name !== 'default' && 'value' in (Object.getOwnPropertyDescriptor(module, name) ?? {}));
      const contents = [`const m = process.getBuiltinModule(${JSON.stringify(args.path)});`, 'export default m;', `export const { ${names.join(', ')} } = m;`].join('\n');
      return { contents, loader: 'js' };
    });
  },
};

/** lib/errors.js from dist/, one module for both builds. */
const sharedErrors = (outdir: string): Plugin => ({
  name: 'shared-errors',
  setup(esbuild) {
    esbuild.onResolve({ filter: /errors\.js$/ }, (args) => {
      const target = resolve(dirname(args.importer), args.path);
      return target === ERRORS ? { path: specifier(outdir, ERRORS), external: true } : undefined;
    });
  },
});

/**
 * A lazy import stays lazy: it points at the module's own entry of the operations build, from a
 * file in `outdir`; `lazy` collects the modules so loaded, the entries that build needs.
 */
const lazyToOperations = (outdir: string, lazy: Set<string>): Plugin => ({
  name: 'lazy-to-operations',
  setup(esbuild) {
    esbuild.onResolve({ filter: /^\./ }, (args) => {
      if (args.kind !== 'dynamic-import') return undefined;
      const target = resolve(dirname(args.importer), args.path);
      lazy.add(target);
      return { path: specifier(outdir, join(OPS, `${entryName(target)}.js`)), external: true };
    });
  },
});

/** `dist/pipelines/reading.js` -> `pipelines~reading`. */
const entryName = (path: string): string => posix(relative(DIST, path)).replace(/\.js$/, '').replaceAll('/', '~');

const common: BuildOptions = {
  bundle: true,
  format: 'esm',
  platform: 'node',
  target: 'node22',
  // string-width is loaded through require on first use (lib/width.ts), from node_modules as it is.
  // So is the AWS SDK, by the object-store modules only: it reads built-ins' lazy properties
  // (fs.ReadStream, crypto.getRandomValues) that the facade above leaves out, and its hundreds of
  // modules would only grow the operations build for commands on local datasets.
  external: ['string-width', '@aws-sdk/*', '@smithy/*'],
  metafile: true,
  logLevel: 'warning',
  // CommonJS packages inside an ES module bundle need a require of their own.
  banner: { js: "const require = process.getBuiltinModule('node:module').createRequire(import.meta.url);" },
};

const launcher = (tool: string): string => `#!/usr/bin/env node
// ${tool}: checks the Node.js version, turns on Node's compile cache, then runs the start-up bundle (scripts/bundle.ts).
if (Number(process.versions.node.split('.')[0]) < 22) {
  process.stderr.write(\`${tool}: error: needs Node.js 22 or newer; this is Node.js \${process.versions.node} (\${process.execPath})\\n\`);
  process.exit(2);
}
if (!process.env.NODE_COMPILE_CACHE && !process.env.NODE_DISABLE_COMPILE_CACHE) {
  // Beside the bundles: only who may change them may change their code cache (in a directory
  // others can write, it would run what they put there), and users' homes stay as they were.
  // Where the installation is not writable, Node goes on without a cache.
  process.getBuiltinModule('node:module').enableCompileCache(process.getBuiltinModule('node:url').fileURLToPath(new URL('.compile-cache', import.meta.url)));
}
await import('./${tool}.main.js');
`;

rmSync(OUT, { recursive: true, force: true });
const lazy = new Set<string>();
const startup = await build({
  ...common,
  entryPoints: Object.fromEntries(TOOLS.map((tool) => [`${tool}.main`, join(DIST, 'cli', `${tool}.js`)])),
  outdir: OUT,
  plugins: [builtinsWithoutFacade, sharedErrors(OUT), lazyToOperations(OUT, lazy)],
});
// Operations load others lazily in turn: build until no new entry turns up.
let operations;
for (let entries = 0; entries !== lazy.size; ) {
  entries = lazy.size;
  operations = await build({
    ...common,
    entryPoints: Object.fromEntries([...lazy].map((path) => [entryName(path), path])),
    outdir: OPS,
    plugins: [builtinsWithoutFacade, sharedErrors(OPS), lazyToOperations(OPS, lazy)],
  });
}
// The web interface: browser code compiled by tsc, bundled for the browser; the page and styles copied as they are.
const WEB = join(OUT, 'web');
const WEB_SOURCES = join(DIST, '..', 'pipelines', 'serve', 'web');
await build({
  entryPoints: { app: join(DIST, 'pipelines', 'serve', 'web', 'app.js') },
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: 'es2022',
  minify: true,
  outdir: WEB,
  logLevel: 'warning',
});
mkdirSync(WEB, { recursive: true });
for (const file of ['index.html', 'app.css']) copyFileSync(join(WEB_SOURCES, file), join(WEB, file));
copyFileSync(join(DIST, '..', 'node_modules', 'uplot', 'dist', 'uPlot.min.css'), join(WEB, 'uPlot.min.css'));
writeFileSync(join(OUT, 'meta.json'), JSON.stringify({ startup: startup.metafile, operations: operations?.metafile }));
for (const tool of TOOLS) {
  const executable = join(OUT, `${tool}.js`);
  writeFileSync(executable, launcher(tool));
  chmodSync(executable, 0o755);
}
