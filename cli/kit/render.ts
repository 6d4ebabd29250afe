/**
 * How commands print rows: every command that prints rows takes `--format table|json|jsonl|csv`
 * and `--wide`. Tables on a terminal fit its width, clipping long cells with an ellipsis; `--wide`
 * or output that is not a terminal gets whole cells.
 */
import { OUTPUT_FORMATS, createRowWriter, renderRows, terminalText, type Column, type OutputFormat, type Row, type RowWriter, type WriterOptions } from '../../lib/output.js';
import type { ParsedArgs, OptionSpec } from './flags.js';
import type { CommandContext } from './program.js';

export const FORMAT_OPTIONS: OptionSpec[] = [
  { flags: '--format <format>', description: OUTPUT_FORMATS.join('|'), default: 'table' },
  { flags: '--wide', description: 'tables: print every cell whole (on a terminal, long cells are clipped to fit)' },
];

export interface RowView {
  format: OutputFormat;
  wide: boolean;
}

/** The `--format` and `--wide` of a command that declares FORMAT_OPTIONS. */
export function rowView(args: ParsedArgs): RowView {
  return { format: args.choice('--format', OUTPUT_FORMATS, 'table'), wide: args.has('--wide') };
}

/** How rows suit the command's stdout: on a terminal, a table fits its width unless --wide, and CSV shows control characters escaped. */
function writerOptions(ctx: CommandContext, view: RowView): WriterOptions {
  if (!ctx.stdout.isTTY) return {};
  const maxWidth = view.wide ? undefined : ctx.stdout.columns;
  return maxWidth === undefined ? { terminal: true } : { maxWidth, terminal: true };
}

/** A streaming writer of rows to stdout in the chosen format. */
export function rowWriter(ctx: CommandContext, view: RowView, columns: readonly Column[]): RowWriter {
  return createRowWriter(view.format, columns, ctx.stdout, writerOptions(ctx, view));
}

/** Text from elsewhere (a node's metrics) for stdout: on a terminal, with its control characters escaped. */
export function writeText(ctx: CommandContext, text: string): void {
  ctx.stdout.write(ctx.stdout.isTTY ? terminalText(text) : text);
}

/** Prints rows; a table with no rows says `empty` (e.g. `(no sources)`) instead of a lone header. */
export function printRows(ctx: CommandContext, view: RowView, columns: readonly Column[], rows: Iterable<Row>, empty?: string): void {
  const list = [...rows];
  ctx.stdout.write(renderRows(list, columns, view.format, writerOptions(ctx, view)));
  if (view.format === 'table' && list.length === 0 && empty !== undefined) ctx.stdout.write(`(${empty})\n`);
}
