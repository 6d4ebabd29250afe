/**
 * Where an offset of a text is, as messages say it (`file:line:column`, `at column N`). A column
 * counts characters (Unicode code points) from 1, as a person and an editor's status bar count
 * them: `é`, `中` and `😀` are one column each, whatever their UTF-8 bytes or UTF-16 units.
 */

/** The column of `offset` (a UTF-16 index) on a line that starts at `lineStart`: code points before it, from 1. */
export function columnAt(text: string, offset: number, lineStart = 0): number {
  return [...text.slice(lineStart, offset)].length + 1;
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
