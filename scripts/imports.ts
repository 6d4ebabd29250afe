/**
 * The import graph of the repository's TypeScript, read from the sources with a small lexer (the
 * TypeScript compiler of this project, version 7, has no JavaScript API), and the layering rules
 * ARCHITECTURE.md states, checked against it:
 *
 * - imports run one way: cli/ -> the engines' entry modules -> their insides -> lib/;
 * - no file outside cli/ imports cli/; lib/ imports no area;
 * - cli/ reaches an engine only through its entry module (`pipelines/index.ts`, ...);
 * - no import cycles (static imports, type-only ones included; a lazy `import()` is not an edge).
 *
 * Test files and test helpers may import the insides of the area they test, and lib/testing/.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';

export interface ImportEdge {
  from: string;
  /** Repository-relative path of the imported `.ts` file, or the package name. */
  to: string;
  kind: 'static' | 'dynamic';
  line: number;
}

/** The top-level folders of TypeScript code. */
export const AREAS = ['lib', 'cli', 'pipelines', 'framework', 'daemon', 'bench', 'scripts'] as const;
/** The engines and their one public module each. */
export const ENGINE_ENTRIES: Record<string, string> = {
  pipelines: 'pipelines/index.ts',
  framework: 'framework/index.ts',
  daemon: 'daemon/index.ts',
};

const isTest = (path: string): boolean => /(^|\/)test\//.test(path) || path.startsWith('lib/testing/');
const areaOf = (path: string): string => path.split('/')[0] ?? '';

/**
 * Module specifiers of the import and export declarations and `import()` calls of a source text.
 * Comments, strings and template literals are skipped as a lexer would, so an `import` inside them
 * is not taken for one.
 */
export function importSpecifiers(source: string): Array<{ spec: string; kind: 'static' | 'dynamic'; line: number }> {
  const found: Array<{ spec: string; kind: 'static' | 'dynamic'; line: number }> = [];
  let i = 0;
  let line = 1;
  /** The last significant token: a keyword or identifier, or a punctuation character. */
  let previous = '';
  const readString = (quote: string): string => {
    let text = '';
    i++;
    while (i < source.length && source[i] !== quote) {
      if (source[i] === '\\') {
        text += source[i + 1] ?? '';
        i += 2;
        continue;
      }
      if (source[i] === '\n') line++;
      text += source[i];
      i++;
    }
    i++;
    return text;
  };
  const skipTemplate = (): void => {
    i++;
    while (i < source.length && source[i] !== '`') {
      if (source[i] === '\\') i++;
      else if (source[i] === '\n') line++;
      else if (source[i] === '$' && source[i + 1] === '{') {
        let depth = 1;
        i += 2;
        while (i < source.length && depth > 0) {
          if (source[i] === '{') depth++;
          else if (source[i] === '}') depth--;
          else if (source[i] === '\n') line++;
          else if (source[i] === '`') skipTemplate();
          else if (source[i] === "'" || source[i] === '"') {
            readString(source[i] as string);
            continue;
          }
          i++;
        }
        continue;
      }
      i++;
    }
    i++;
  };
  /** Inside `import ... from` / `export ... from`: waiting for the `from` string (or a bare `import 'x'`). */
  let declaration: { line: number } | undefined;
  while (i < source.length) {
    const ch = source[i] as string;
    if (ch === '\n') {
      line++;
      i++;
    } else if (ch === '/' && source[i + 1] === '/') {
      while (i < source.length && source[i] !== '\n') i++;
    } else if (ch === '/' && source[i + 1] === '*') {
      const end = source.indexOf('*/', i + 2);
      const stop = end < 0 ? source.length : end + 2;
      for (let k = i; k < stop; k++) if (source[k] === '\n') line++;
      i = stop;
    } else if (ch === '/' && startsRegex(previous)) {
      // A regular expression literal: skipped whole, so a quote inside it starts no string.
      i++;
      let inClass = false;
      while (i < source.length && source[i] !== '\n' && (inClass || source[i] !== '/')) {
        if (source[i] === '\\') i++;
        else if (source[i] === '[') inClass = true;
        else if (source[i] === ']') inClass = false;
        i++;
      }
      i++;
      while (i < source.length && /[a-z]/.test(source[i] as string)) i++;
      previous = 'regex';
    } else if (ch === "'" || ch === '"') {
      const startLine = line;
      const text = readString(ch);
      if (declaration && (previous === 'from' || previous === 'import')) {
        found.push({ spec: text, kind: 'static', line: declaration.line });
        declaration = undefined;
      } else if (previous === 'import(') found.push({ spec: text, kind: 'dynamic', line: startLine });
      previous = 'string';
    } else if (ch === '`') {
      skipTemplate();
      previous = 'string';
    } else if (/[A-Za-z_$]/.test(ch)) {
      let word = '';
      while (i < source.length && /[\w$]/.test(source[i] as string)) word += source[i++];
      // `import` / `export` start a declaration only where a statement can start.
      if ((word === 'import' || word === 'export') && (previous === '' || previous === ';' || previous === '}' || previous === 'string' || previous === ')')) {
        let k = i;
        while (k < source.length && /\s/.test(source[k] as string)) k++;
        if (word === 'import' && source[k] === '(') {
          previous = 'import-call';
          continue;
        }
        declaration = { line };
      }
      previous = word;
    } else if (ch === '(' && (previous === 'import' || previous === 'import-call')) {
      previous = 'import(';
      i++;
    } else if (/\s/.test(ch)) {
      i++;
    } else {
      // A declaration ends at its semicolon; `export { a }` without `from` has no module.
      if (ch === ';') declaration = undefined;
      previous = ch;
      i++;
    }
  }
  return found;
}

/** Whether a `/` after this token starts a regular expression rather than a division. */
function startsRegex(previous: string): boolean {
  if (previous === '' || previous === 'return' || previous === 'typeof' || previous === 'case' || previous === 'of' || previous === 'in') return true;
  return previous.length === 1 && '(,=:[!&|?{};+-*%<>~^'.includes(previous);
}

function walk(dir: string, root: string, found: string[]): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) walk(path, root, found);
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) found.push(relative(root, path).split(sep).join('/'));
  }
  return found;
}

/** Every import of every TypeScript file of the repository, resolved to repository paths. */
export function importGraph(root: string): ImportEdge[] {
  const files = AREAS.flatMap((area) => walk(join(root, area), root, []));
  const edges: ImportEdge[] = [];
  for (const from of files) {
    for (const { spec, kind, line } of importSpecifiers(readFileSync(join(root, from), 'utf8'))) {
      if (spec.startsWith('node:')) continue;
      const to = spec.startsWith('.') ? relative(root, resolve(root, dirname(from), spec.replace(/\.js$/, '.ts'))).split(sep).join('/') : (spec.match(/^(@[^/]+\/)?[^/]+/)?.[0] ?? spec);
      edges.push({ from, to, kind, line });
    }
  }
  return edges;
}

/** What the layering rules say about the graph: one line per broken rule, empty when all hold. */
export function layeringProblems(edges: readonly ImportEdge[]): string[] {
  const problems: string[] = [];
  const internal = (to: string): boolean => AREAS.some((area) => to.startsWith(`${area}/`));
  for (const edge of edges) {
    if (!internal(edge.to)) continue;
    const at = `${edge.from}:${edge.line} imports ${edge.to}`;
    const fromArea = areaOf(edge.from);
    const toArea = areaOf(edge.to);
    if (toArea === 'cli' && fromArea !== 'cli') problems.push(`${at}: only cli/ may import cli/`);
    if (fromArea === 'lib' && toArea !== 'lib') problems.push(`${at}: lib/ imports no area`);
    if (isTest(edge.from)) continue;
    if (toArea === 'lib' && edge.to.startsWith('lib/testing/')) problems.push(`${at}: lib/testing/ is for tests`);
    if (fromArea === 'cli' && toArea in ENGINE_ENTRIES && edge.to !== ENGINE_ENTRIES[toArea]) {
      problems.push(`${at}: cli/ reaches ${toArea}/ only through ${ENGINE_ENTRIES[toArea]}`);
    }
    if (fromArea in ENGINE_ENTRIES && toArea in ENGINE_ENTRIES && fromArea !== toArea && edge.to !== ENGINE_ENTRIES[toArea]) {
      problems.push(`${at}: one engine reaches another only through its entry module ${ENGINE_ENTRIES[toArea]}`);
    }
    if (fromArea in ENGINE_ENTRIES && edge.to === ENGINE_ENTRIES[fromArea] && edge.from !== edge.to) {
      problems.push(`${at}: the insides of ${fromArea}/ do not import its own entry module`);
    }
  }
  for (const cycle of cycles(edges.filter((e) => e.kind === 'static' && internal(e.to)))) problems.push(`import cycle: ${cycle.join(' -> ')}`);
  return problems;
}

/** Every cycle of the graph, each once, as the list of files around it (Tarjan's strongly connected components). */
export function cycles(edges: readonly ImportEdge[]): string[][] {
  const next = new Map<string, string[]>();
  for (const { from, to } of edges) next.set(from, [...(next.get(from) ?? []), to]);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  let counter = 0;
  const visit = (node: string): void => {
    index.set(node, counter);
    low.set(node, counter++);
    stack.push(node);
    onStack.add(node);
    for (const to of next.get(node) ?? []) {
      if (!index.has(to)) {
        visit(to);
        low.set(node, Math.min(low.get(node) as number, low.get(to) as number));
      } else if (onStack.has(to)) low.set(node, Math.min(low.get(node) as number, index.get(to) as number));
    }
    if (low.get(node) !== index.get(node)) return;
    const component: string[] = [];
    for (let top = stack.pop(); top !== undefined; top = stack.pop()) {
      onStack.delete(top);
      component.push(top);
      if (top === node) break;
    }
    const selfLoop = (next.get(node) ?? []).includes(node);
    if (component.length > 1 || selfLoop) found.push([...component.reverse(), component[0] as string]);
  };
  for (const node of next.keys()) if (!index.has(node)) visit(node);
  return found;
}
