/**
 * A bad `find --match` expression: exit 2, with the expression and a caret under the column
 * where it went wrong, so the user sees the spot rather than counting characters.
 */
import { displayWidth } from '../../../lib/width.js';
import { InvalidInputError } from '../../../lib/errors.js';
import { columnAt } from '../../../lib/text-position.js';

/** Characters of context shown on each side of the caret in a long expression. */
const CONTEXT = 60;

/**
 * The expression on one line and a caret under `offset`; wide (CJK) characters count double. A long
 * expression is cut to the stretch around the offset, with `…` where text was left out.
 */
export function caretLines(text: string, offset: number): string {
  const shown = text.replace(/[\u0000-\u001f\u007f]/g, ' ');
  const chars = [...shown.slice(0, offset)];
  const before = chars.length > CONTEXT ? `…${chars.slice(-CONTEXT).join('')}` : chars.join('');
  const rest = [...shown.slice(offset)];
  const after = rest.length > CONTEXT ? `${rest.slice(0, CONTEXT).join('')}…` : rest.join('');
  return `  ${before}${after}\n  ${' '.repeat(displayWidth(before))}^`;
}

export class ExpressionError extends InvalidInputError {
  constructor(
    readonly expression: string,
    readonly offset: number,
    readonly reason: string,
    /** Which `--match` (from 1) when several were given; names the flag in the message. */
    readonly matchNumber?: number,
    hint?: string,
    /** What the user calls the expression: the flag on the command line, a parameter in an API. */
    readonly option = '--match',
  ) {
    const which = matchNumber === undefined ? option : `${option} #${matchNumber}`;
    super(`invalid ${which} expression at column ${columnAt(expression, offset)}: ${reason}`, { detail: caretLines(expression, offset), ...(hint ? { hint } : {}) });
  }

  /** The same error, naming which of several `--match` options it came from. */
  numbered(matchNumber: number): ExpressionError {
    return new ExpressionError(this.expression, this.offset, this.reason, matchNumber, this.hint, this.option);
  }

  /** The same error, naming the expression as `option` (an API's `match` parameter is no `--match` flag). */
  naming(option: string): ExpressionError {
    return new ExpressionError(this.expression, this.offset, this.reason, this.matchNumber, this.hint, option);
  }
}
