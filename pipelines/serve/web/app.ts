/// <reference lib="dom" />
/**
 * The web interface of `trajstore serve`: a page whose address after `#` names the view
 * (`#/`, `#/m/MOUNT/runs?...`, `#/m/MOUNT/run/DOC`, `#/m/MOUNT/find?q=...`,
 * `#/m/MOUNT/compare/A/B`, `#/m/MOUNT/charts`), all read from the server's JSON API.
 */
import { api, enc, h, num, errorBox } from './dom.js';
import { chartsView } from './charts-view.js';
import { compareView, runColumn } from './run-view.js';
import { runsView } from './runs-view.js';
import { searchView } from './search-view.js';

interface MountInfo {
  name: string;
  dataset_uri: string;
  kind: string;
  snapshot_id: string;
  rows: Record<string, number>;
}

function mountsView(): HTMLElement {
  const root = h('section', { id: 'mounts' }, h('p', { class: 'muted' }, 'loading…'));
  api<{ mounts: MountInfo[] }>('/api/mounts')
    .then(({ mounts }) => {
      root.replaceChildren(
        h(
          'table',
          {},
          h('tr', {}, h('th', {}, 'mount'), h('th', {}, 'dataset'), h('th', {}, 'kind'), h('th', {}, 'runs'), h('th', {}, 'steps'), h('th', {}, 'tool calls'), h('th', {}, 'snapshot')),
          ...mounts.map((m) =>
            h('tr', {}, h('td', {}, h('a', { href: `#/m/${enc(m.name)}/runs` }, m.name)), h('td', {}, m.dataset_uri), h('td', {}, m.kind), h('td', {}, num(m.rows.runs)), h('td', {}, num(m.rows.steps)), h('td', {}, num(m.rows.tool_calls)), h('td', {}, m.snapshot_id)),
          ),
        ),
      );
    })
    .catch((error: unknown) => root.replaceChildren(errorBox(error)));
  return root;
}

function nav(mount: string | undefined): HTMLElement[] {
  if (!mount) return [];
  const m = enc(mount);
  return [h('a', { href: `#/m/${m}/runs` }, `runs (${mount})`), h('a', { href: `#/m/${m}/find` }, 'search'), h('a', { href: `#/m/${m}/charts` }, 'charts')];
}

function route(): void {
  const [path = '', search = ''] = location.hash.replace(/^#/, '').split('?');
  const params = new URLSearchParams(search);
  const main = document.getElementById('main') as HTMLElement;
  let parts: string[];
  try {
    parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  } catch {
    // A hand-edited address with a broken %-escape: say so, rather than leave the last view under it.
    main.replaceChildren(errorBox(new Error(`this address is not valid (a broken %-escape): #${path}`)));
    return;
  }
  const mount = parts[0] === 'm' ? parts[1] : undefined;
  (document.getElementById('nav') as HTMLElement).replaceChildren(...nav(mount));
  let view: HTMLElement;
  if (mount === undefined) view = mountsView();
  else if (parts[2] === 'run' && parts[3]) view = runColumn(mount, parts[3]);
  else if (parts[2] === 'find') view = searchView(mount, params);
  else if (parts[2] === 'compare' && parts[3] && parts[4]) view = compareView(mount, parts[3], parts[4]);
  else if (parts[2] === 'charts') view = chartsView(mount);
  else view = runsView(mount, params);
  main.replaceChildren(view);
  window.scrollTo(0, 0);
}

window.addEventListener('hashchange', route);
route();
