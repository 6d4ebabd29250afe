/**
 * Where an offset of a text is, as messages say it (`file:line:column`, `at column N`). A column
 * counts characters (Unicode code points) from 1, as a person and an editor's status bar count
 * them: `é`, `中` and `😀` are one column each, whatever their UTF-8 bytes or UTF-16 units.
 */

/** The column of `offset` (a UTF-16 index) on a line that starts at `lineStart`: code points before it, from 1. */
export function columnAt(text: string, offset: number, lineStart = 0): number {
  // Counted in place: a minified document is one line of up to hundreds of MiB.
  let column = 1;
  for (let i = lineStart; i < offset; i++) {
    const unit = text.charCodeAt(i);
    if (unit < 0xdc00 || unit > 0xdfff || i === lineStart || text.charCodeAt(i - 1) < 0xd800 || text.charCodeAt(i - 1) > 0xdbff) column++;
  }
  return column;
}

/** Line (from `firstLine`, the line of the text's first character) and column of `offset`. */
export function lineAndColumn(text: string, offset: number, firstLine = 1): { line: number; column: number } {
  let line = firstLine;
  let lineStart = 0;
  for (let i = text.indexOf('\n'); i !== -1 && i < offset; i = text.indexOf('\n', i + 1)) {
    line += 1;
    lineStart = i + 1;
  }
  return { line, column: columnAt(text, offset, lineStart) };
}
