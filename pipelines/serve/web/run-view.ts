/// <reference lib="dom" />
/**
 * The trajectory viewer: a run's facts, its parent and subagent runs, then its steps (user, agent
 * and system turns; reasoning; tool calls with arguments and results; observations; tokens, cost
 * and timing). Steps come a page at a time from the server: a page is fetched when its place
 * nears the screen, so a run of thousands of steps paints after its first page. The same column
 * serves side by side comparison of two runs.
 */
import { api, clipped, enc, h, num, query, time, usd, errorBox } from './dom.js';

const PAGE = 100;
/** The height a page of steps is given until it is loaded (about a step's). */
const PLACEHOLDER_STEP_PX = 110;

type Row = Record<string, unknown>;
interface Run extends Row {
  document_id: string;
  session_id: string;
  step_count: number;
  parent: { document_id: string } | null;
  children: Array<{ document_id: string; agent_name: string | null; parent_tool_call_id: string | null; step_count: number }>;
}
interface Call {
  tool_call_id: string;
  function_name: string;
  arguments: unknown;
  result: unknown;
  is_error: boolean | null;
  duration_ms: number | null;
  status: string | null;
  exit_code: number | null;
}
interface Step extends Row {
  step_id: string;
  source: string;
  effective_kind: string;
  tool_calls: Call[];
}

const asText = (value: unknown): string => (typeof value === 'string' ? value : JSON.stringify(value, null, 2));

function stepView(mount: string, step: Step, childByCall: Map<string, Run['children'][number]>): HTMLElement {
  const metaParts = [
    step.timestamp ? time(step.timestamp) : null,
    step.model_name ? `model ${String(step.model_name)}` : null,
    step.prompt_tokens !== null && step.prompt_tokens !== undefined ? `in ${num(step.prompt_tokens)}` : null,
    step.completion_tokens !== null && step.completion_tokens !== undefined ? `out ${num(step.completion_tokens)}` : null,
    step.cached_tokens ? `cached ${num(step.cached_tokens)}` : null,
    step.cost_usd !== null && step.cost_usd !== undefined ? usd(step.cost_usd) : null,
    step.latency_ms !== null && step.latency_ms !== undefined ? `${num(step.latency_ms)} ms` : null,
  ].filter((p): p is string => p !== null);
  const el = h(
    'article',
    { class: `step ${step.source}`, id: `step-${step.step_id}`, 'data-step': step.step_id },
    h('div', { class: 'meta' }, h('span', { class: 'role' }, step.source), step.effective_kind !== step.source ? h('span', {}, step.effective_kind) : null, h('span', {}, `#${step.step_id}`), ...metaParts.map((p) => h('span', {}, p))),
  );
  if (typeof step.message_text === 'string' && step.message_text !== '') el.append(clipped(step.message_text));
  if (typeof step.reasoning_content === 'string' && step.reasoning_content !== '') el.append(h('details', { class: 'reasoning' }, h('summary', {}, 'reasoning'), clipped(step.reasoning_content)));
  for (const call of step.tool_calls) {
    const child = childByCall.get(call.tool_call_id);
    el.append(
      h(
        'div',
        { class: `call${call.is_error ? ' error' : ''}` },
        h('div', {}, h('b', {}, h('bdi', {}, call.function_name)), ' ', h('span', { class: 'muted' }, h('bdi', {}, call.tool_call_id)), call.duration_ms !== null ? h('span', { class: 'muted' }, ` ${num(call.duration_ms)} ms`) : null, call.is_error ? h('span', { class: 'error' }, ' error') : null),
        child ? h('div', {}, 'subagent run: ', h('a', { href: `#/m/${enc(mount)}/run/${enc(child.document_id)}`, class: 'subagent' }, h('bdi', {}, child.document_id))) : null,
        h('details', {}, h('summary', {}, 'arguments'), clipped(asText(call.arguments), 4000, 'pre')),
        call.result !== null && call.result !== undefined ? h('details', {}, h('summary', {}, 'result'), clipped(asText(call.result), 4000, 'pre')) : null,
      ),
    );
  }
  if (typeof step.observation_text === 'string' && step.observation_text !== '' && step.tool_calls.length === 0) {
    el.append(h('details', {}, h('summary', {}, 'observation'), clipped(step.observation_text, 4000, 'pre')));
  }
  return el;
}

function runHeader(mount: string, run: Run): HTMLElement {
  return h(
    'div',
    { class: 'card' },
    h('h2', {}, run.document_id),
    h(
      'div',
      { class: 'meta' },
      // Values from the data are isolated (<bdi>): a right-to-left override in an agent's name
      // would otherwise turn the figures after it around ($0.0125 shown as 5210.0$).
      'run ',
      h('bdi', {}, String(run.run_id ?? '–')),
      ' · session ',
      h('bdi', {}, run.session_id),
      ' · agent ',
      h('bdi', {}, String(run.agent_name ?? run.agent_id)),
      ' · model ',
      h('bdi', {}, String(run.agent_model_name ?? '–')),
      ` · ${num(run.step_count)} steps · ${num(run.tool_call_count)} tool calls · in ${num(run.prompt_tokens)} / out ${num(run.completion_tokens)} tokens · ${usd(run.cost_usd)} · `,
      h('bdi', {}, time(run.started_at)),
      ' → ',
      h('bdi', {}, time(run.finished_at)),
    ),
    run.parent ? h('div', {}, 'parent run: ', h('a', { href: `#/m/${enc(mount)}/run/${enc(run.parent.document_id)}`, class: 'parent' }, h('bdi', {}, run.parent.document_id))) : null,
    run.children.length ? h('div', {}, 'subagent runs: ', ...run.children.map((c) => h('a', { href: `#/m/${enc(mount)}/run/${enc(c.document_id)}`, class: 'subagent', style: 'margin-right:8px' }, h('bdi', {}, c.document_id)))) : null,
    run.final_metrics ? h('details', {}, h('summary', {}, 'final metrics'), h('pre', {}, asText(run.final_metrics))) : null,
  );
}

/** A run's column: its header and its steps, page by page as they near the screen. */
export function runColumn(mount: string, documentId: string): HTMLElement {
  const root = h('section', { class: 'run', 'data-run': documentId }, h('p', { class: 'muted' }, 'loading…'));
  void (async () => {
    try {
      // The id goes in the query: a path would lose an id of "." or "..", and a long one would not fit.
      const { run } = await api<{ run: Run }>(`/api/mounts/${enc(mount)}/run${query({ document_id: documentId })}`);
      const childByCall = new Map(run.children.filter((c) => c.parent_tool_call_id).map((c) => [c.parent_tool_call_id as string, c]));
      // Steps [offset, end) of the run, to load when they near the screen.
      const placeholder = (offset: number, end: number): HTMLElement => h('div', { class: 'page', style: `min-height:${(end - offset) * PLACEHOLDER_STEP_PX}px`, 'data-offset': offset, 'data-end': end });
      const pages = Array.from({ length: Math.ceil(run.step_count / PAGE) }, (_, i) => placeholder(i * PAGE, Math.min((i + 1) * PAGE, run.step_count)));
      root.replaceChildren(runHeader(mount, run), ...pages);
      const load = async (page: HTMLElement): Promise<void> => {
        const offset = Number(page.dataset.offset);
        const end = Number(page.dataset.end);
        const { steps, next_offset } = await api<{ steps: Step[]; next_offset: number | null }>(`/api/mounts/${enc(mount)}/run/steps${query({ document_id: documentId, offset, limit: end - offset })}`);
        page.replaceChildren(...steps.map((s) => stepView(mount, s, childByCall)));
        page.style.minHeight = '';
        page.dataset.loaded = 'true';
        // The server ends a page of big steps early (it bounds a page's bytes): the rest waits, as a page of its own, until it nears the screen.
        if (next_offset !== null && next_offset < end) {
          const rest = placeholder(next_offset, end);
          page.after(rest);
          observer.observe(rest);
        }
      };
      const observer = new IntersectionObserver(
        (entries) => {
          for (const entry of entries) {
            if (!entry.isIntersecting) continue;
            observer.unobserve(entry.target);
            load(entry.target as HTMLElement).catch((error: unknown) => entry.target.replaceChildren(errorBox(error)));
          }
        },
        { rootMargin: '1500px 0px' },
      );
      pages.forEach((p) => observer.observe(p));
    } catch (error) {
      root.replaceChildren(errorBox(error));
    }
  })();
  return root;
}

/** Two runs side by side (of the same task, as a rule: their run ids are shown to check). */
export function compareView(mount: string, a: string, b: string): HTMLElement {
  return h('section', { class: 'cols', id: 'compare-view' }, runColumn(mount, a), runColumn(mount, b));
}
