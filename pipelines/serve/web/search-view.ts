/// <reference lib="dom" />
/**
 * Search with `find`'s expression: the server decides the matches and clips each preview; the
 * page only marks the terms in the preview it was given, so neither changes the match set.
 */
import { api, enc, h, highlighted, query, time, errorBox } from './dom.js';

interface FindMatch {
  document_id: string;
  step_id: string | null;
  step_source: string | null;
  timestamp: string | null;
  preview: string;
}
interface FindAnswer {
  snapshot_id: string;
  search: { mode: string; scope: string };
  truncated: boolean;
  matches: FindMatch[];
  highlight: string[];
}

export function searchView(mount: string, params: URLSearchParams): HTMLElement {
  const q = params.get('q') ?? '';
  const input = h('input', { name: 'q', value: q, size: 60, placeholder: 'find expression, e.g. "disk full" AND #agent(retry)' });
  const form = h('form', { class: 'filters', onsubmit: (e) => (e.preventDefault(), (location.hash = `#/m/${enc(mount)}/find${query({ q: input.value })}`)) }, input, h('button', { type: 'submit' }, 'find'));
  const results = h('div', { id: 'results' });
  const root = h('section', {}, form, results);
  if (q) {
    results.append(h('p', { class: 'muted' }, 'searching…'));
    api<FindAnswer>(`/api/mounts/${enc(mount)}/find${query({ match: [q] })}`)
      .then((answer) => {
        const summary = h('p', { class: 'muted' }, `${answer.matches.length} matches${answer.truncated ? ' (truncated)' : ''} · mode ${answer.search.mode} · scope ${answer.search.scope} · snapshot ${answer.snapshot_id}`);
        results.replaceChildren(
          summary,
          ...answer.matches.map((m) =>
            h(
              'div',
              { class: 'card match' },
              // Values from the data are isolated (<bdi>): a right-to-left override in one would turn the words after it around.
              h('a', { href: `#/m/${enc(mount)}/run/${enc(m.document_id)}${m.step_id ? `?step=${enc(m.step_id)}` : ''}` }, h('bdi', {}, m.document_id), m.step_id ? ' · step ' : '', m.step_id ? h('bdi', {}, m.step_id) : null),
              h('span', { class: 'muted' }, ' ', h('bdi', {}, m.step_source ?? ''), ' ', h('bdi', {}, time(m.timestamp))),
              h('div', { class: 'msg preview' }, highlighted(m.preview, answer.highlight)),
            ),
          ),
        );
      })
      .catch((error: unknown) => results.replaceChildren(errorBox(error)));
  }
  return root;
}
