/// <reference lib="dom" />
/** What the views share: building elements, calling the API, formatting figures, highlighting. */

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | ((event: Event) => void) | undefined>;

/** An element with attributes (`on*` are listeners) and children. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) continue;
    if (typeof value === 'function') el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children) if (child !== null && child !== undefined && child !== false) el.append(typeof child === 'number' ? String(child) : child);
  return el;
}

export class ApiError extends Error {}

/** GET (or POST with a JSON body) an API path; an error answer becomes an ApiError with its message. */
export async function api<T>(path: string, body?: unknown): Promise<T> {
  const response = await fetch(path, body === undefined ? {} : { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const json = (await response.json()) as T & { error?: { message: string; hint?: string } };
  if (!response.ok) throw new ApiError(json.error ? `${json.error.message}${json.error.hint ? ` (${json.error.hint})` : ''}` : `HTTP ${response.status}`);
  return json;
}

export const enc = encodeURIComponent;

export function query(params: Record<string, string | number | undefined | string[]>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === '') continue;
    if (Array.isArray(v)) v.forEach((x) => q.append(k, x));
    else q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

export const num = (v: unknown): string => (v === null || v === undefined ? '–' : Number(v).toLocaleString('en-US'));
export const usd = (v: unknown): string => (v === null || v === undefined ? '–' : `$${Number(v).toFixed(4)}`);
export const time = (v: unknown): string => (typeof v === 'string' ? v.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '–');

/**
 * Lower case that keeps every character's length, so that positions found in it are positions in
 * the text: `İ` lower-cases to two code units, which would shift every match after it.
 */
function lowerInPlace(text: string): string {
  let out = '';
  for (const ch of text) {
    const lower = ch.toLowerCase();
    out += lower.length === ch.length ? lower : ch;
  }
  return out;
}

/**
 * `text` with every case-insensitive occurrence of `terms` in <mark>. Display only: what matched
 * was decided by the server, and this never hides or adds a match.
 */
export function highlighted(text: string, terms: readonly string[]): DocumentFragment {
  const out = document.createDocumentFragment();
  const wanted = terms.map((t) => lowerInPlace(t.replace(/\s+/g, ' ').trim())).filter((t) => t !== '');
  const lower = lowerInPlace(text);
  let at = 0;
  while (at < text.length && wanted.length > 0) {
    let best = -1;
    let length = 0;
    for (const t of wanted) {
      const i = lower.indexOf(t, at);
      if (i >= 0 && (best < 0 || i < best || (i === best && t.length > length))) {
        best = i;
        length = t.length;
      }
    }
    if (best < 0) break;
    out.append(text.slice(at, best), h('mark', {}, text.slice(best, best + length)));
    at = best + length;
  }
  out.append(text.slice(at));
  return out;
}

/** Long text shown clipped to `max` characters with a toggle to show it whole. */
export function clipped(text: string, max = 4000, tag: 'pre' | 'div' = 'div'): HTMLElement {
  const el = h(tag, { class: tag === 'pre' ? '' : 'msg' });
  if (text.length <= max) {
    el.textContent = text;
    return el;
  }
  let whole = false;
  const render = (): void => {
    el.textContent = whole ? text : `${text.slice(0, max)}…`;
    el.append(' ', h('button', { onclick: () => ((whole = !whole), render()) }, whole ? 'show less' : `show all (${text.length.toLocaleString('en-US')} chars)`));
  };
  render();
  return el;
}

export function errorBox(error: unknown): HTMLElement {
  return h('p', { class: 'error' }, error instanceof Error ? error.message : String(error));
}
