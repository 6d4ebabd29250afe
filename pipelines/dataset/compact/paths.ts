/**
 * JSON paths of compact record stores (`$`, `$.a.b`, `$.a[0]`, and their combinations) and the
 * `--column NAME=JSON_PATH` flags that name them.
 */
import { InvalidInputError } from '../../../lib/errors.js';
import type { CompactColumn } from '../layout.js';

export type PathStep = string | number;

/** Column names a user column may not take: the record store's own columns (and upstream's). */
export const RESERVED_COLUMNS = ['filename', 'data', 'data_json', 'line', 'raw', '_raw_', '_offload_'];
const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export function parseJsonPath(path: string, flag = '--column'): PathStep[] {
  if (!path.startsWith('$')) throw new InvalidInputError(`${flag}: JSON path ${JSON.stringify(path)} must start with $`, { hint: 'paths look like $, $.a.b or $.a[0]' });
  const steps: PathStep[] = [];
  const re = /\.([^.[\]]+)|\[(\d+)\]/y;
  re.lastIndex = 1;
  while (re.lastIndex < path.length) {
    const at = re.lastIndex;
    const match = re.exec(path);
    if (!match) throw new InvalidInputError(`${flag}: JSON path ${JSON.stringify(path)} is not supported at offset ${at}`, { hint: 'paths look like $, $.a.b or $.a[0]' });
    steps.push(match[1] !== undefined ? match[1] : Number(match[2]));
  }
  return steps;
}

/** The value at a path, or undefined when the path does not lead anywhere. */
export function evaluatePath(value: unknown, steps: readonly PathStep[]): unknown {
  let current = value;
  for (const step of steps) {
    if (typeof step === 'number') {
      if (!Array.isArray(current)) return undefined;
      current = current[step];
    } else {
      if (current === null || typeof current !== 'object' || Array.isArray(current)) return undefined;
      current = (current as Record<string, unknown>)[step];
    }
    if (current === undefined) return undefined;
  }
  return current;
}

export interface CompactSpec {
  id_path: string;
  timestamp_path: string;
  columns: CompactColumn[];
}

/** `--column` flags -> the store's id/timestamp paths and user columns; names and paths are checked. */
export function parseColumnFlags(flags: readonly string[]): CompactSpec {
  const spec: CompactSpec = { id_path: '$.id', timestamp_path: '$.timestamp', columns: [] };
  const seen = new Set<string>();
  for (const flag of flags) {
    const eq = flag.indexOf('=');
    if (eq <= 0) throw new InvalidInputError(`--column ${JSON.stringify(flag)}: expected NAME=JSON_PATH`);
    const name = flag.slice(0, eq);
    const path = flag.slice(eq + 1);
    if (!NAME.test(name)) throw new InvalidInputError(`--column ${JSON.stringify(flag)}: column name must match ${NAME.source}`);
    // SQL names are case-insensitive: `A` and `a` are one column, and `ID` is `id`.
    const key = name.toLowerCase();
    if (RESERVED_COLUMNS.includes(key)) throw new InvalidInputError(`--column ${JSON.stringify(flag)}: ${name} is a reserved column name`, { hint: `reserved: ${RESERVED_COLUMNS.join(', ')}` });
    if (seen.has(key)) throw new InvalidInputError(`--column ${JSON.stringify(flag)}: column ${name} given twice (column names are case-insensitive)`);
    seen.add(key);
    parseJsonPath(path, `--column ${name}`);
    if (key === 'id') spec.id_path = path;
    else if (key === 'timestamp') spec.timestamp_path = path;
    else spec.columns.push({ name, path });
  }
  return spec;
}
