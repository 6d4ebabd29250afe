/**
 * `--gateway-split TEMPLATE`: the partition a trace is stored in, from the placeholders `{user}`
 * (the request header USER_HEADER, `_unknown` when absent), `{date}` (`YYYY-MM-DD`) and `{hour}`
 * (`00`-`23`), both UTC at the trace's first event, and literal text of letters, digits, `.`, `_`,
 * `-` and `/` between segments. Any other placeholder or character is refused when the template is
 * read (exit 2), before anything listens. A partition is a directory of source paths inside the one
 * gateway dataset: the run of a trace is at `<partition>/<agent_id>/<session_id>`.
 */
import { InvalidInputError } from '../../../lib/errors.js';
import { isPathSafe } from './identity.js';

/** The request header whose value fills `{user}`. */
export const USER_HEADER = 'x-trajstore-user-id';
/** `{user}` of a request without USER_HEADER. */
export const UNKNOWN_USER = '_unknown';

const PLACEHOLDERS = ['user', 'date', 'hour'] as const;
type Placeholder = (typeof PLACEHOLDERS)[number];
type Piece = { text: string } | { placeholder: Placeholder };

export interface SplitTemplate {
  readonly source: string;
  readonly usesUser: boolean;
  /** The partition for a trace first seen at `at` from `user`. */
  render(user: string, at: Date): string;
}

function refuse(template: string, why: string): never {
  throw new InvalidInputError(`invalid --gateway-split ${JSON.stringify(template)}: ${why}`, { hint: 'use {user}, {date} and {hour} with letters, digits, . _ - and / between them, e.g. {user}/{date}' });
}

export function parseSplitTemplate(template: string): SplitTemplate {
  const pieces: Piece[] = [];
  const re = /\{([^{}]*)\}|([A-Za-z0-9._/-]+)|(.)/gsy;
  for (let m = re.exec(template); m; m = re.exec(template)) {
    if (m[1] !== undefined) {
      if (!(PLACEHOLDERS as readonly string[]).includes(m[1])) refuse(template, `unknown placeholder {${m[1]}} (only {user}, {date} and {hour})`);
      pieces.push({ placeholder: m[1] as Placeholder });
    } else if (m[2] !== undefined) pieces.push({ text: m[2] });
    else refuse(template, `${JSON.stringify(m[3])} is not allowed`);
    if (re.lastIndex >= template.length) break;
  }
  if (pieces.length === 0) refuse(template, 'it is empty');
  // Placeholders render as safe segments, so the literal skeleton decides whether every segment is one.
  const skeleton = pieces.map((p) => ('text' in p ? p.text : 'x')).join('');
  if (!skeleton.split('/').every(isPathSafe)) refuse(template, 'each /-separated part must be a non-empty name, not . or ..');
  const two = (n: number): string => String(n).padStart(2, '0');
  return {
    source: template,
    usesUser: pieces.some((p) => 'placeholder' in p && p.placeholder === 'user'),
    render(user, at) {
      const values: Record<Placeholder, string> = { user, date: `${at.getUTCFullYear()}-${two(at.getUTCMonth() + 1)}-${two(at.getUTCDate())}`, hour: two(at.getUTCHours()) };
      return pieces.map((p) => ('text' in p ? p.text : values[p.placeholder])).join('');
    },
  };
}
