/// <reference lib="dom" />
/**
 * The run list of a mount: filters and sorting (in the page's address, so a view can be shared),
 * pages of runs fetched by cursor as the list scrolls, and only the rows in sight in the document
 * (a virtual list of fixed-height rows). Two ticked runs can be compared.
 */
import { api, enc, h, num, query, time, usd, errorBox } from './dom.js';

const ROW = 30;
const PAGE = 200;
const FILTERS = ['agent', 'model', 'since', 'until', 'source', 'min_cost', 'max_cost'] as const;
const SORTS = ['started_at', 'cost_usd', 'step_count', 'tool_call_count'];

interface RunRow {
  document_id: string;
  run_id: string | null;
  agent_name: string | null;
  agent_id: string;
  agent_model_name: string | null;
  started_at: string | null;
  step_count: number;
  tool_call_count: number;
  cost_usd: number | null;
  parent_session_id: string | null;
}

export function runsView(mount: string, params: URLSearchParams): HTMLElement {
  const root = h('section');
  const inputs = new Map<string, HTMLInputElement | HTMLSelectElement>();
  const form = h('form', { class: 'filters', onsubmit: (e) => (e.preventDefault(), apply()) });
  for (const name of FILTERS) {
    const input = h('input', { name, value: params.get(name) ?? '', placeholder: name.startsWith('since') || name.startsWith('until') ? '2026-05-01' : '', size: 14 });
    inputs.set(name, input);
    form.append(h('label', {}, name, input));
  }
  const sort = h('select', { name: 'sort' }, ...SORTS.map((s) => h('option', { value: s, selected: (params.get('sort') ?? 'started_at') === s }, s)));
  const order = h('select', { name: 'order' }, ...['desc', 'asc'].map((s) => h('option', { value: s, selected: (params.get('order') ?? 'desc') === s }, s)));
  inputs.set('sort', sort).set('order', order);
  const picked = new Set<string>();
  const compare = h('button', { type: 'button', id: 'compare', disabled: true, onclick: () => (location.hash = `#/m/${enc(mount)}/compare/${[...picked].map(enc).join('/')}`) }, 'compare 2 runs');
  form.append(h('label', {}, 'sort', sort), h('label', {}, 'order', order), h('button', { type: 'submit' }, 'apply'), compare);

  function apply(): void {
    const q: Record<string, string> = {};
    for (const [name, input] of inputs) if (input.value) q[name] = input.value;
    location.hash = `#/m/${enc(mount)}/runs${query(q)}`;
  }

  const status = h('p', { class: 'muted' }, 'loading…');
  const head = h('div', { class: 'runhead' }, h('span'), h('span', {}, 'document'), h('span', {}, 'agent'), h('span', {}, 'model'), h('span', {}, 'started'), h('span', {}, 'steps'), h('span', {}, 'tools'), h('span', {}, 'cost'));
  const viewport = h('div', { class: 'viewport', id: 'runs' });
  const spacer = h('div');
  viewport.append(spacer);
  root.append(form, status, head, viewport);

  const rows: RunRow[] = [];
  let cursor: string | null | undefined;
  let loading = false;
  const base: Record<string, string> = {};
  for (const name of [...FILTERS, 'sort', 'order']) {
    const v = params.get(name);
    if (v) base[name] = v;
  }

  async function more(): Promise<void> {
    if (loading || cursor === null) return;
    loading = true;
    try {
      const page = await api<{ runs: RunRow[]; next_cursor: string | null }>(`/api/mounts/${enc(mount)}/runs${query({ ...base, limit: PAGE, cursor })}`);
      rows.push(...page.runs);
      cursor = page.next_cursor;
      status.textContent = `${rows.length.toLocaleString('en-US')} runs${cursor ? ' loaded (scroll for more)' : ''}`;
      draw();
    } catch (error) {
      status.replaceWith(errorBox(error));
    } finally {
      loading = false;
    }
  }

  function rowOf(run: RunRow, i: number): HTMLElement {
    const box = h('input', { type: 'checkbox', checked: picked.has(run.document_id), onchange: (e) => {
      const on = (e.target as HTMLInputElement).checked;
      if (on) picked.add(run.document_id);
      else picked.delete(run.document_id);
      compare.disabled = picked.size !== 2;
    } });
    return h(
      'div',
      { class: 'runrow', style: `top:${i * ROW}px`, 'data-document': run.document_id },
      box,
      h('span', {}, h('a', { href: `#/m/${enc(mount)}/run/${enc(run.document_id)}`, title: run.document_id }, h('bdi', {}, run.document_id)), run.parent_session_id ? h('span', { class: 'muted' }, ' (subagent)') : null),
      h('span', {}, run.agent_name ?? run.agent_id),
      h('span', {}, run.agent_model_name ?? '–'),
      h('span', {}, time(run.started_at)),
      h('span', {}, num(run.step_count)),
      h('span', {}, num(run.tool_call_count)),
      h('span', {}, usd(run.cost_usd)),
    );
  }

  /** Only the rows in sight (and a few around) are in the document. */
  function draw(): void {
    spacer.style.height = `${rows.length * ROW}px`;
    const first = Math.max(0, Math.floor(viewport.scrollTop / ROW) - 10);
    const last = Math.min(rows.length, Math.ceil((viewport.scrollTop + viewport.clientHeight) / ROW) + 10);
    viewport.replaceChildren(spacer, ...rows.slice(first, last).map((run, k) => rowOf(run, first + k)));
    if (last >= rows.length - 20) void more();
  }

  viewport.addEventListener('scroll', () => requestAnimationFrame(draw));
  void more();
  return root;
}
