/** The built-in reports of `stats` (named in --help, so kept apart from the code that computes them). */
export const REPORTS = ['overview', 'agents', 'models', 'tools'] as const;
export type ReportName = (typeof REPORTS)[number];
