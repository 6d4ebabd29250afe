/**
 * A user's SQL predicate (`export --where`) is spliced into a statement as `WHERE (<predicate>)`.
 * SQLite still decides what is read-only (sql/runner.ts), but splicing must not let the text
 * leave its parentheses: `1) UNION SELECT ... (1` would be a read-only statement that selects
 * something other than runs. So the predicate is scanned as SQLite's tokenizer sees it (strings,
 * quoted identifiers, comments) and refused when a parenthesis closes one it did not open, when
 * it holds a `;` outside a string, or when a string or comment never ends.
 */
import { InvalidInputError } from '../../../lib/errors.js';

/** What closes each quoting form SQLite knows: 'text', "identifier", `identifier`, [identifier]. */
const QUOTES: Record<string, string> = { "'": "'", '"': '"', '`': '`', '[': ']' };

export function checkPredicate(text: string, flag: string): void {
  const refuse = (why: string): never => {
    throw new InvalidInputError(`${flag}: ${why}`, { hint: `${flag} takes one SQL expression over the columns of runs, e.g. ${flag} "agent_name = 'ops-bot' AND cost_usd > 0.1"` });
  };
  if (text.trim() === '') refuse('the predicate is empty');
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i] as string;
    const close = QUOTES[c];
    if (close !== undefined) {
      // A doubled closing quote inside a string or identifier is the quote itself.
      let j = i + 1;
      for (;;) {
        j = text.indexOf(close, j);
        if (j < 0) refuse(`a ${c === "'" ? 'string' : 'quoted name'} opened at character ${i + 1} never ends`);
        if (close !== ']' && text[j + 1] === close) j += 2;
        else break;
      }
      i = j;
    } else if (c === '-' && text[i + 1] === '-') {
      const end = text.indexOf('\n', i);
      i = end < 0 ? text.length : end;
    } else if (c === '/' && text[i + 1] === '*') {
      const end = text.indexOf('*/', i + 2);
      if (end < 0) refuse(`a comment opened at character ${i + 1} never ends`);
      i = end + 1;
    } else if (c === '(') depth++;
    else if (c === ')') {
      if (--depth < 0) refuse(`the ")" at character ${i + 1} closes a parenthesis the predicate did not open`);
    } else if (c === ';') refuse(`";" at character ${i + 1}: one expression, not statements`);
    else if (isParameter(text, i)) refuse(`"${c}" at character ${i + 1} is a parameter, and ${flag} has no values to bind: write the value into the predicate`);
  }
  if (depth > 0) refuse(`${depth} parenthes${depth === 1 ? 'is is' : 'es are'} never closed`);
}

/**
 * Whether a bind parameter starts at `i`: `?`, or `:name`, `@name`, `$name` (SQLite's forms). The
 * statement binds values of its own, which a parameter of the predicate would take in their place.
 */
function isParameter(text: string, i: number): boolean {
  const c = text[i];
  if (c === '?') return true;
  if (c !== ':' && c !== '@' && c !== '$') return false;
  // `$` may also be inside a name (`a$b`), never at its start.
  return /[A-Za-z0-9_]/.test(text[i + 1] ?? '') && !(c === '$' && /[A-Za-z0-9_$]/.test(text[i - 1] ?? ''));
}
