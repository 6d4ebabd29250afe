/**
 * What `onboard` teaches, section by section: short explanations, each followed by a trajstore
 * command that the walkthrough runs on the dataset (the user's, or the example data). The
 * commands are argument lists; the command line runs them as the user would and shows their output.
 */
import { InvalidInputError } from '../../lib/errors.js';
import { shellQuote } from '../../lib/shell.js';
import { openDatasetArg } from '../dataset/open.js';
import type { ResolveContext } from '../pins/resolve.js';
import type { OnboardSection } from './sections.js';

export interface LessonStep {
  /** What the step shows, a paragraph. */
  text: string;
  /** The trajstore arguments it runs (without the program). */
  args: string[];
}

export interface Lesson {
  section: OnboardSection;
  title: string;
  steps: LessonStep[];
}

/** What the lessons need to know about the dataset to show commands that find something. */
interface DatasetFacts {
  /** A run to show: one with tool calls when there is one. */
  documentId: string | undefined;
  /** A term that occurs in the dataset, for `find`. */
  term: string;
}

async function factsOf(rc: ResolveContext, dataset: string, example: boolean): Promise<DatasetFacts> {
  const opened = await openDatasetArg(rc, dataset);
  try {
    if (opened.kind !== 'storyline') {
      throw new InvalidInputError(`${dataset}: onboard walks through the runs of a Storyline dataset; this one is a compact record store`, {
        hint: `\`trajstore onboard\` without a dataset uses example data; \`trajstore query ${shellQuote(dataset)} --sql 'SELECT * FROM dataset.records LIMIT 5'\` reads this store's records`,
      });
    }
    const row = opened.db.prepare('SELECT document_id FROM runs ORDER BY tool_call_count > 0 DESC, rowid LIMIT 1').get() as { document_id: string } | undefined;
    return { documentId: row?.document_id, term: example ? 'disk full' : 'error' };
  } finally {
    opened.close();
  }
}

const SHOW_TEXT = '`show` prints one run as a transcript: who said what, the reasoning, each tool call with its arguments and result, tokens, cost and timings. On a terminal it pages; --format markdown pastes into an issue.';

/** The show lesson on a dataset with no runs yet: why there is nothing to show (the count proves it) and how to bring runs in. */
function noRunToShow(ds: string): LessonStep {
  return {
    text: `${SHOW_TEXT} This dataset has no runs yet, so there is none to show: import your agents' logs into it first (\`trajstore import -f LOGS -t ${shellQuote(ds)} --mode append\`, or keep live logs in it with \`trajstore sync\`), then run \`trajstore onboard show ${shellQuote(ds)}\` again.`,
    args: ['query', ds, '--sql', 'SELECT count(*) AS runs FROM dataset.runs'],
  };
}

function lesson(section: OnboardSection, ds: string, facts: DatasetFacts, exportDir: string): Lesson {
  switch (section) {
    case 'stats':
      return {
        section,
        title: 'What is in a dataset: stats',
        steps: [
          { text: 'A dataset is a directory of Parquet parts with a SQLite index. `stats` says how it is doing and how many runs, steps and tool calls it holds.', args: ['stats', ds] },
          { text: 'Built-in reports sum up tokens, cost and durations: `overview`, `agents`, `models` and `tools` (tool frequency and error rate).', args: ['stats', 'tools', ds] },
        ],
      };
    case 'find':
      return {
        section,
        title: 'Finding runs and steps: find',
        steps: [
          { text: `\`find --match\` searches the text of every step with the full-text index. Here: the phrase "${facts.term}".`, args: ['find', ds, '--match', facts.term] },
          { text: 'Fields narrow a term (#user, #assistant, #reasoning, #observation, #system), JSON predicates test run or step fields, and AND, OR, NOT combine them. `$.path = value` tests the runs\' JSON fields.', args: ['find', ds, '--match', '$.status = "done"'] },
          { text: 'Several --match must all match; --sort relevance puts the best matches first; --format json gives the whole search document for programs.', args: ['find', ds, '--match', facts.term.split(' ')[0] as string, '--match', 'NOT #user(alert)', '--sort', 'relevance', '--max-results', '5'] },
        ],
      };
    case 'query':
      return {
        section,
        title: 'Asking anything with SQL: query',
        steps: [
          { text: '`query` runs one read-only SQLite statement. A lone dataset is the schema `dataset`, with the relations runs, steps and tool_calls.', args: ['query', ds, '--sql', 'SELECT agent_name, count(*) AS runs, sum(step_count) AS steps, round(sum(cost_usd), 4) AS cost_usd FROM dataset.runs GROUP BY agent_name ORDER BY runs DESC, agent_name'] },
          { text: 'Which tools fail, and how long they take:', args: ['query', ds, '--sql', 'SELECT function_name, count(*) AS calls, sum(coalesce(is_error, 0)) AS errors, round(avg(duration_ms)) AS avg_ms FROM dataset.tool_calls GROUP BY 1 ORDER BY calls DESC LIMIT 10'] },
          { text: 'JSON columns are read with json_extract; --format json, jsonl or csv feed other programs.', args: ['query', ds, '--sql', "SELECT document_id, json_extract(task_json, '$.result.status') AS status FROM dataset.runs LIMIT 5", '--format', 'csv'] },
        ],
      };
    case 'show':
      return {
        section,
        title: 'Reading one run: show',
        steps: [facts.documentId === undefined ? noRunToShow(ds) : { text: SHOW_TEXT, args: ['show', ds, '--document-id', facts.documentId, '--no-pager'] }],
      };
    case 'export':
      return {
        section,
        title: 'Sharing a subset: export',
        steps: [
          { text: '`export` converts a dataset to ATIF, ACTF, chat messages or Storyline; --match, --where, --session-id and the other filters take only some runs.', args: ['export', '-f', ds, '-t', `${exportDir}/done.atif.jsonl`, '-o', 'atif', '--where', "json_extract(task_json, '$.result.status') = 'done'", '--overwrite'] },
        ],
      };
  }
}

export async function lessons(rc: ResolveContext, sections: readonly OnboardSection[], dataset: string, example: boolean, exportDir: string): Promise<Lesson[]> {
  const facts = await factsOf(rc, dataset, example);
  return sections.map((section) => lesson(section, dataset, facts, exportDir));
}
