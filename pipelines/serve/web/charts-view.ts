/// <reference lib="dom" />
/**
 * Charts of the stats reports: tokens and cost by model per day (uPlot, from the `timeline`
 * report) and tool frequency with error rate (bars, from the `tools` report).
 */
import uPlot from 'uplot';
import { api, enc, h, num, errorBox } from './dom.js';

type Row = Record<string, string | number | null>;
const COLORS = ['#2b7de9', '#1f9d55', '#e8590c', '#9b59b6', '#e03131', '#0c8599', '#5c940d', '#862e9c'];

function byModel(rows: Row[], field: string): { days: number[]; series: Map<string, Array<number | null>> } {
  const days = [...new Set(rows.map((r) => String(r.day)))].filter((d) => d !== 'null').sort();
  const index = new Map(days.map((d, i) => [d, i]));
  const series = new Map<string, Array<number | null>>();
  for (const r of rows) {
    const i = index.get(String(r.day));
    if (i === undefined) continue;
    const model = String(r.model);
    const values = series.get(model) ?? Array<number | null>(days.length).fill(null);
    values[i] = Number(r[field] ?? 0);
    series.set(model, values);
  }
  return { days: days.map((d) => Date.parse(`${d}T00:00:00Z`) / 1000), series };
}

function lineChart(title: string, rows: Row[], field: (r: Row) => number, width: number): HTMLElement {
  const prepared = rows.map((r) => ({ ...r, value: field(r) }));
  const { days, series } = byModel(prepared, 'value');
  const box = h('div', { class: 'card chart', 'data-chart': title }, h('h3', {}, title));
  if (days.length === 0) {
    box.append(h('p', { class: 'muted' }, 'no dated steps'));
    return box;
  }
  const models = [...series.keys()];
  const opts: uPlot.Options = {
    width,
    height: 260,
    series: [{}, ...models.map((m, i) => ({ label: m, stroke: COLORS[i % COLORS.length] as string, width: 2, points: { show: true } }))],
    axes: [{}, { size: 70 }],
  };
  // uPlot draws into the element once it is in the document.
  requestAnimationFrame(() => new uPlot(opts, [days, ...models.map((m) => series.get(m) as Array<number | null>)] as uPlot.AlignedData, box));
  return box;
}

function toolBars(rows: Row[]): HTMLElement {
  const max = Math.max(1, ...rows.map((r) => Number(r.calls)));
  return h(
    'div',
    { class: 'card chart', 'data-chart': 'tools' },
    h('h3', {}, 'tool calls and error rate'),
    h(
      'table',
      {},
      h('tr', {}, h('th', {}, 'tool'), h('th', {}, 'calls'), h('th', {}, ''), h('th', {}, 'error rate'), h('th', {}, '')),
      ...rows.map((r) =>
        h(
          'tr',
          {},
          h('td', {}, String(r.tool)),
          h('td', {}, num(r.calls)),
          h('td', {}, h('span', { class: 'bar', style: `width:${Math.round((200 * Number(r.calls)) / max)}px` })),
          h('td', {}, `${(Number(r.error_rate) * 100).toFixed(1)}%`),
          h('td', {}, h('span', { class: 'bar err', style: `width:${Math.round(200 * Number(r.error_rate))}px` })),
        ),
      ),
    ),
  );
}

export function chartsView(mount: string): HTMLElement {
  const root = h('section', { id: 'charts' }, h('p', { class: 'muted' }, 'loading…'));
  Promise.all([api<{ rows: Row[] }>(`/api/mounts/${enc(mount)}/stats/timeline`), api<{ rows: Row[] }>(`/api/mounts/${enc(mount)}/stats/tools`)])
    .then(([timeline, tools]) => {
      const width = Math.max(400, Math.min(1100, root.clientWidth || 900));
      root.replaceChildren(
        lineChart('tokens by model per day', timeline.rows, (r) => Number(r.input_tokens ?? 0) + Number(r.output_tokens ?? 0) + Number(r.cache_read_tokens ?? 0) + Number(r.cache_write_tokens ?? 0), width),
        lineChart('cost (USD) by model per day', timeline.rows, (r) => Number(r.cost_usd ?? 0), width),
        toolBars(tools.rows),
      );
    })
    .catch((error: unknown) => root.replaceChildren(errorBox(error)));
  return root;
}
