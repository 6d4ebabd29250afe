/**
 * How commands print rows: every command that prints rows takes `--format table|json|jsonl|csv`
 * and `--wide`. Tables on a terminal fit its width, clipping long cells with an ellipsis; `--wide`
 * or output that is not a terminal gets whole cells.
 */
import { OUTPUT_FORMATS, createRowWriter, renderRows, type Column, type OutputFormat, type Row, type RowWriter } from '../../lib/output.js';
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

/** The width a table may take on the command's stdout: a terminal's width unless --wide. */
function tableWidth(ctx: CommandContext, view: RowView): number | undefined {
  return !view.wide && ctx.stdout.isTTY ? ctx.stdout.columns : undefined;
}

/** A streaming writer of rows to stdout in the chosen format. */
export function rowWriter(ctx: CommandContext, view: RowView, columns: readonly Column[]): RowWriter {
  const maxWidth = tableWidth(ctx, view);
  return createRowWriter(view.format, columns, ctx.stdout, maxWidth === undefined ? {} : { maxWidth });
}

/** Prints rows; a table with no rows says `empty` (e.g. `(no sources)`) instead of a lone header. */
export function printRows(ctx: CommandContext, view: RowView, columns: readonly Column[], rows: Iterable<Row>, empty?: string): void {
  const list = [...rows];
  const maxWidth = tableWidth(ctx, view);
  ctx.stdout.write(renderRows(list, columns, view.format, maxWidth === undefined ? {} : { maxWidth }));
  if (view.format === 'table' && list.length === 0 && empty !== undefined) ctx.stdout.write(`(${empty})\n`);
}
