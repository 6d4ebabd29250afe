/**
 * The syntax tree of a `find --match` expression (spec/trajstore.md "find rules",
 * reference/trajectory-formats.md §5.4). Spans are UTF-16 offsets into the expression text,
 * so errors found after parsing (by the planner) can still point at the offending part.
 */

/** What a text term searches. Plain terms search `content`. */
export const TEXT_FIELDS = ['content', 'message', 'user', 'assistant', 'system', 'reasoning', 'observation', 'prompt', 'model', 'all'] as const;
export type TextField = (typeof TEXT_FIELDS)[number];
/** `#agent(...)` is another name for `#assistant(...)` (the Storyline calls that side `agent`). */
export const TEXT_FIELD_ALIASES: Readonly<Record<string, TextField>> = { agent: 'assistant' };

/**
 * Columns a `#json.COL(...)` selector may name. Step-level ones are the turn's JSON; the rest are
 * the run's. `extra` is the turn's `extra` in step scope and the document's `extra` in run scope.
 */
export const STEP_JSON_COLUMNS = ['metrics', 'extra'] as const;
export const RUN_JSON_COLUMNS = ['agent_extra', 'final_metrics', 'extra', 'meta', 'unknown_fields', 'task', 'prompt'] as const;
export type JsonColumn = (typeof STEP_JSON_COLUMNS)[number] | (typeof RUN_JSON_COLUMNS)[number];
export const JSON_COLUMNS: readonly JsonColumn[] = [...new Set<JsonColumn>([...STEP_JSON_COLUMNS, ...RUN_JSON_COLUMNS])];

export const COMPARE_OPS = ['=', '!=', '>', '>=', '<', '<='] as const;
export type CompareOp = (typeof COMPARE_OPS)[number];

export type JsonScalar = string | number | boolean | null;

export interface Span {
  start: number;
  end: number;
}

export interface TextNode {
  type: 'text';
  field: TextField;
  text: string;
  /** Written as a quoted phrase (`"a b"`) rather than a bare word. */
  quoted: boolean;
  span: Span;
}

export interface JsonNode {
  type: 'json';
  /** `null`: unscoped (`$.path` or `#json("$.path")`), checked against every JSON column of the scope. */
  column: JsonColumn | null;
  /** Normalised JSONPath as SQLite's json_extract takes it: `$.a.b[0]`, `$."x y"`. */
  path: string;
  op: CompareOp;
  value: JsonScalar;
  span: Span;
}

export interface NotNode {
  type: 'not';
  operand: Expr;
  span: Span;
}

export interface BoolNode {
  type: 'and' | 'or';
  operands: Expr[];
  span: Span;
}

export type Expr = TextNode | JsonNode | NotNode | BoolNode;

/** Visits every leaf (text and JSON predicates) of an expression. */
export function leaves(expr: Expr): Array<TextNode | JsonNode> {
  switch (expr.type) {
    case 'text':
    case 'json':
      return [expr];
    case 'not':
      return leaves(expr.operand);
    case 'and':
    case 'or':
      return expr.operands.flatMap(leaves);
  }
}
