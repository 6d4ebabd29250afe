/**
 * The web interface of `trajstore serve` in a real headless Chromium (bench/lib/chromium.ts)
 * against a real server: load, filter, open a run, follow a subagent link, search and see the
 * highlights, compare two runs, view the charts, Chinese text, and data holding markup and script
 * (which must stay text on every view). Every request the page makes
 * is recorded: none may leave the server. Screenshots of each view are written to
 * dist/test-artifacts/serve-web/ (kept after the run, to look at).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { launchChromium, type Browser } from '../../bench/lib/chromium.js';
import { DIST_ROOT } from '../../lib/testing/run-tool.js';
import { startServeProcess, type ServeProcess } from '../../bench/lib/serve-process.js';
import { writeBigRun } from './helpers/big-run.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { sandbox } from './helpers/sandbox.js';

const ARTIFACTS = join(DIST_ROOT, 'test-artifacts', 'serve-web');
const { home, env, run } = sandbox('serve-web-');
const dataset = join(home, 'ds');
const PARENT = 'a9a20bd4-fdf9-4885-8fa1-01d41970c171';
const CHILD = `${PARENT}.agent-a4c1e9f27b3d5e601`;
let server: ServeProcess;
let browser: Browser;
let page: Page;
const offServer: string[] = [];

const shot = (name: string) => page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: false });
const go = async (hash: string) => {
  await page.goto(new URL(`/#${hash}`, server.url).href);
  await page.waitForLoadState('networkidle');
};

test.before(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  for (const [from, extra] of [
    [join(SHARED_FIXTURES, 'synthetic', 'claude-code', 'projects', '-home-dev-www-atlas-docs'), ['-i', 'agentb-code']],
    [join(SHARED_FIXTURES, 'persisting', 'atif'), ['--mode', 'append']],
  ] as Array<[string, string[]]>) {
    const r = await run(['import', '-f', from, '-t', dataset, ...extra]);
    assert.is(r.code, 0, r.stderr);
  }
  server = await startServeProcess(['serve', dataset, '--listen', '127.0.0.1:0'], { env, cwd: home });
  browser = await launchChromium();
  page = await browser.context.newPage();
  const origin = new URL(server.url).origin;
  page.on('request', (request) => {
    if (new URL(request.url()).origin !== origin) offServer.push(request.url());
  });
});

test.after(async () => {
  await browser?.close();
  await server?.stop();
});

test('load: the mounts with their counts', async () => {
  await go('/');
  await page.waitForSelector('#mounts table');
  const text = await page.textContent('#mounts');
  assert.match(text ?? '', 'default');
  assert.match(text ?? '', dataset);
  await shot('1-mounts');
});

test('run list: filter by model, sort, then open a run', async () => {
  await page.click('a[href="#/m/default/runs"]');
  await page.waitForSelector('.runrow');
  assert.is(await page.locator('.runrow').count(), 6);
  await page.fill('input[name=model]', 'claude-opus-4-6');
  await page.click('form.filters button[type=submit]');
  await page.waitForFunction(() => document.querySelectorAll('.runrow').length === 1);
  assert.is(await page.getAttribute('.runrow', 'data-document'), PARENT);
  assert.match(page.url(), 'model=claude-opus-4-6');
  await shot('2-runs-filtered');
  await go('/m/default/runs?sort=step_count&order=asc');
  await page.waitForSelector('.runrow');
  const steps = await page.locator('.runrow span:nth-child(6)').allTextContents();
  const numbers = steps.map((s) => Number(s.replace(/,/g, '')));
  assert.equal(numbers, [...numbers].sort((a, b) => a - b));
  await page.click(`.runrow[data-document="${PARENT}"] a`);
  await page.waitForSelector('article.step');
  assert.is(await page.locator('article.step').count(), 10, 'every step of the run');
  for (const role of ['user', 'agent', 'system']) assert.ok((await page.locator(`article.step.${role}`).count()) > 0, role);
  assert.match((await page.textContent('.run .card')) ?? '', /10 steps/);
  await shot('3-run');
});

test('subagent: the Task call links to its subagent run, which links back to its parent', async () => {
  await page.click('.call a.subagent');
  await page.waitForSelector(`section.run[data-run="${CHILD}"] article.step`);
  assert.match(page.url(), encodeURIComponent(CHILD));
  assert.is(await page.textContent('a.parent'), PARENT);
  await page.click('details:has(summary:text("arguments"))');
  await shot('4-subagent');
});

test('search: matches with their terms highlighted', async () => {
  await go('/m/default/find?q=link');
  await page.waitForSelector('#results .match, #results .error');
  const api = (await (await fetch(new URL('/api/mounts/default/find?match=link', server.url))).json()) as { matches: unknown[] };
  assert.ok(api.matches.length > 0);
  assert.is(await page.locator('#results .match').count(), api.matches.length, 'highlighting shows every match and no other');
  const marks = await page.locator('#results mark').allTextContents();
  assert.ok(marks.length > 0);
  for (const mark of marks) assert.is(mark.toLowerCase(), 'link');
  await shot('5-search');
});

test('Chinese text renders in a CJK font, not as boxes', async () => {
  await go('/m/default/run/run-unicode_zh_15');
  await page.waitForSelector('article.step');
  const text = (await page.textContent('section.run')) ?? '';
  assert.match(text, /[\u4e00-\u9fff]{2,}/);
  // Chromium says which fonts drew a node's glyphs: the Chinese ones come from a CJK font.
  const cdp = await browser.context.newCDPSession(page);
  await cdp.send('DOM.enable');
  await cdp.send('CSS.enable');
  const { root } = await cdp.send('DOM.getDocument', { depth: -1 });
  const handle = await page.evaluateHandle(() => [...document.querySelectorAll('article.step .msg')].find((e) => /[\u4e00-\u9fff]/.test(e.textContent ?? '')) as HTMLElement);
  await handle.evaluate((el) => el.setAttribute('id', 'chinese'));
  const { nodeId } = await cdp.send('DOM.querySelector', { nodeId: root.nodeId, selector: '#chinese' });
  const { fonts } = await cdp.send('CSS.getPlatformFontsForNode', { nodeId });
  assert.ok(fonts.some((f) => /WenQuanYi|Noto Sans CJK|Droid Sans Fallback/.test(f.familyName) && f.glyphCount > 0), JSON.stringify(fonts));
  await shot('6-chinese');
});

test('compare two runs side by side', async () => {
  await go('/m/default/runs?agent=pchronicle-fixture-agent');
  await page.waitForSelector('.runrow');
  const boxes = page.locator('.runrow input[type=checkbox]');
  await boxes.nth(0).check();
  assert.ok(await page.isDisabled('#compare'), 'one run is not a comparison');
  await boxes.nth(1).check();
  await page.click('#compare');
  await page.waitForSelector('#compare-view section.run:nth-child(2) article.step');
  assert.is(await page.locator('#compare-view section.run').count(), 2);
  const [a, b] = await page.locator('#compare-view section.run').evaluateAll((els) => els.map((e) => (e as HTMLElement).dataset.run));
  assert.ok(a && b && a !== b);
  await shot('7-compare');
});

test('charts: tokens and cost by model over time, tool calls and error rate', async () => {
  await go('/m/default/charts');
  await page.waitForSelector('.chart .uplot canvas');
  assert.is(await page.locator('.chart').count(), 3);
  assert.is(await page.locator('.chart .uplot').count(), 2);
  const legend = (await page.textContent('.chart[data-chart^="tokens"]')) ?? '';
  assert.match(legend, 'claude-opus-4-6');
  assert.match((await page.textContent('.chart[data-chart="tools"]')) ?? '', 'Task');
  await shot('8-charts');
});

test('hostile text: data cannot reorder the facts around it, highlights stay on the match, a broken address says so; the page cannot be framed', async () => {
  const ds = join(home, 'hostile');
  const atif = join(home, 'hostile.atif.json');
  // Right-to-left overrides left open in a name, a document id and a tool's name.
  const doc = {
    schema_version: 'ATIF-v1.6',
    session_id: 'bidi',
    trajectory_id: 'run\u202e',
    agent: { name: 'agent\u202e', version: '1' },
    steps: [
      { step_id: 1, source: 'user', message: 'İİİİİİİİ omega target' },
      { step_id: 2, source: 'agent', message: 'calling', tool_calls: [{ tool_call_id: 'call-1', function_name: 'read\u202e', arguments: {} }] },
    ],
  };
  writeFileSync(atif, JSON.stringify(doc));
  assert.is((await run(['import', '-f', atif, '-t', ds])).code, 0);
  const hostile = await startServeProcess(['serve', ds, '--listen', '127.0.0.1:0'], { env, cwd: home });
  // A page of its own: the shared one records any request that leaves the first server.
  const page = await browser.context.newPage();
  try {
    const at = async (hash: string) => {
      const response = await page.goto(new URL(`/#${hash}`, hostile.url).href);
      await page.waitForLoadState('networkidle');
      return response;
    };
    /** Whether `text` in the first `selector` is drawn left to right (its first character left of its last). */
    const leftToRight = (selector: string, text: string) =>
      page.evaluate(([selector, text]) => {
        const walker = document.createTreeWalker(document.querySelector(selector) as Element, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
          const at = (node.textContent ?? '').indexOf(text);
          if (at < 0) continue;
          const x = (i: number): number => {
            const range = document.createRange();
            range.setStart(node as Node, i);
            range.setEnd(node as Node, i + 1);
            return range.getBoundingClientRect().left;
          };
          return x(at) < x(at + text.length - 1);
        }
        throw new Error(`no ${text} in ${selector}`);
      }, [selector, text] as const);
    const csp = (await at('/'))?.headers()['content-security-policy'] ?? '';
    assert.match(csp, "frame-ancestors 'none'");
    const api = await fetch(new URL('/api/mounts/default/runs', hostile.url));
    assert.is(api.headers.get('x-content-type-options'), 'nosniff');
    const { runs } = (await api.json()) as { runs: Array<{ document_id: string }> };
    await at(`/m/default/run/${encodeURIComponent(runs[0]!.document_id)}`);
    await page.waitForSelector('.card .meta');
    const isolated = await page.locator('.card .meta bdi').allTextContents();
    assert.ok(isolated.includes('agent\u202e'), `the agent's name is isolated: ${JSON.stringify(isolated)}`);
    assert.ok(await leftToRight('.call', 'call-1'), 'the call id after the tool name reads left to right');
    // U+0130 lower-cases to two code units: positions taken from the lowered text would mark "mega".
    await at('/m/default/find?q=target');
    await page.waitForSelector('#results .match, #results .error');
    assert.equal(await page.locator('#results mark').allTextContents(), ['target']);
    await at('/m/default/find?q=calling');
    await page.waitForSelector('#results .match');
    assert.ok(await leftToRight('#results .match a', 'step'), 'the step after the document id reads left to right');
    assert.ok(await leftToRight('#results .match', 'agent'), 'the step source after the link reads left to right');
    await at('/m/default/run/%E0%A4%A');
    assert.match((await page.locator('#main .error').textContent()) ?? '', 'this address is not valid');
  } finally {
    await page.close();
    await hostile.stop();
  }
});

test('stored script: markup, script islands, event attributes, javascript: links and quotes in every field of the data run nothing on any view, and show as text', async () => {
  // Each payload, if it ever became markup, would set window.__pwned (or load an image or fetch off the server).
  const payload = (where: string): string =>
    [
      `<script>window.__pwned='${where}'</script>`,
      `<img src=x onerror="window.__pwned='${where}'">`,
      `</script><script>window.__pwned='${where}'</script>`,
      `[link](javascript:window.__pwned='${where}') [d](data:text/html,<script>parent.__pwned=1</script>)`,
      `<svg onload="window.__pwned='${where}'"></svg>`,
      `" onmouseover="window.__pwned='${where}'" x='`,
      '\u2028\u2029',
    ].join(' ');
  const name = (where: string): string => `${where}<img src=x onerror="window.__pwned='${where}'">"'`;
  const doc = {
    schema_version: 'ATIF-v1.6',
    session_id: name('session'),
    trajectory_id: name('run'),
    agent: { name: name('agent'), version: '1', model_name: name('model'), extra: { note: payload('agent-extra') } },
    steps: [
      { step_id: 1, timestamp: '2026-06-15T09:00:01Z', source: 'user', message: `user ${payload('user')}` },
      {
        step_id: 2,
        timestamp: '2026-06-15T09:00:02Z',
        source: 'agent',
        model_name: name('stepmodel'),
        message: `assistant ${payload('assistant')}`,
        reasoning_content: `reasoning ${payload('reasoning')}`,
        tool_calls: [{ tool_call_id: name('call'), function_name: name('tool'), arguments: { path: payload('argument'), [name('key')]: 1 } }],
        observation: { results: [{ source_call_id: name('call'), content: `result ${payload('result')}` }] },
        metrics: { prompt_tokens: 10, completion_tokens: 5, cost_usd: 0.01 },
      },
      // Long text is clipped, then shown whole on request: the end of it too is only text.
      { step_id: 3, timestamp: '2026-06-15T09:00:03Z', source: 'agent', message: `${'L'.repeat(100_000)} long ${payload('long')}` },
    ],
  };
  const inbox = join(home, 'script-in');
  mkdirSync(inbox, { recursive: true });
  // The file name becomes the run's source path.
  writeFileSync(join(inbox, `${name('file')}.json`), JSON.stringify(doc));
  const ds = join(home, 'script');
  const imported = await run(['import', '-f', inbox, '-t', ds]);
  assert.is(imported.code, 0, imported.stderr);
  const hostile = await startServeProcess(['serve', ds, '--listen', '127.0.0.1:0'], { env, cwd: home });
  const page = await browser.context.newPage();
  const origin = new URL(hostile.url).origin;
  const elsewhere: string[] = [];
  page.on('request', (request) => {
    if (new URL(request.url()).origin !== origin) elsewhere.push(request.url());
  });
  page.on('dialog', (dialog) => void dialog.dismiss().then(() => elsewhere.push(`dialog ${dialog.message()}`)));
  try {
    const { runs } = (await (await fetch(new URL('/api/mounts/default/runs', hostile.url))).json()) as { runs: Array<{ document_id: string }> };
    const id = encodeURIComponent(runs[0]!.document_id);
    // What each view must show of the data, as text: a name's start, a text's script.
    const named = (where: string): string => `${where}<img src=x onerror=`;
    const script = (where: string): string => `<script>window.__pwned='${where}'</script>`;
    // Each view, what to wait for, and what it must show.
    const views: Array<[string, string, string[]]> = [
      ['/m/default/runs', '.runrow', [named('run'), named('agent'), named('model')]],
      [`/m/default/run/${id}`, 'article.step[data-step="3"]', [...['run', 'session', 'agent', 'model', 'stepmodel', 'tool', 'call', 'key'].map(named), ...['user', 'assistant', 'reasoning', 'argument', 'result', 'long'].map(script)]],
      [`/m/default/compare/${id}/${id}`, 'section.run:nth-child(2) article.step[data-step="3"]', [named('run'), named('tool'), script('result')]],
      ['/m/default/find?q=onerror', '#results .match', ['onerror']],
      ['/m/default/charts', '.chart .uplot canvas', [named('tool')]],
      [`/m/${encodeURIComponent(name('mount'))}/runs`, '.error', [named('mount')]],
      [`/m/default/run/${encodeURIComponent(name('missing'))}`, '.error', [named('missing')]],
    ];
    for (const [hash, loaded, shown] of views) {
      await page.goto(new URL(`/#${hash}`, hostile.url).href);
      await page.waitForSelector(loaded);
      await page.evaluate(() => document.querySelectorAll('details').forEach((d) => (d.open = true)));
      const showAll = page.locator('button', { hasText: 'show all' });
      while ((await showAll.count()) > 0) await showAll.first().click();
      await page.waitForTimeout(200);
      const seen = await page.evaluate(() => ({
        pwned: (window as { __pwned?: unknown }).__pwned,
        markup: [...document.querySelectorAll('img, svg, iframe, object, embed, script')].filter((e) => e.getAttribute('src') !== 'assets/app.js').map((e) => e.outerHTML.slice(0, 100)),
        links: [...document.querySelectorAll('a')].map((a) => a.getAttribute('href') ?? '').filter((href) => !href.startsWith('#')),
        text: document.body.innerText,
      }));
      assert.is(seen.pwned, undefined, `${hash}: a script of the data ran`);
      assert.equal(seen.markup, [], `${hash}: the data became markup`);
      assert.equal(seen.links, [], `${hash}: the data became a link off the page`);
      for (const text of shown) assert.ok(seen.text.includes(text), `${hash}: ${JSON.stringify(text)} is shown, as text`);
    }
    assert.equal(elsewhere, [], 'nothing was fetched off the server, and no dialog opened');
  } finally {
    await page.close();
    await hostile.stop();
  }
});

test('runs whose document id no path can carry (".", "..", 5,000 characters) open from the run list', async () => {
  const src = join(home, 'unpathable');
  mkdirSync(src, { recursive: true });
  const ids = ['.', '..', 'x'.repeat(5000)];
  ids.forEach((id, i) => writeFileSync(join(src, `${i}.json`), JSON.stringify({ schema_version: 'ATIF-v1.6', session_id: `s${i}`, trajectory_id: id, agent: { name: 'a', version: '1' }, steps: [{ step_id: 1, source: 'user', message: `hello ${i}` }] })));
  const ds = join(home, 'unpathable-ds');
  assert.is((await run(['import', '-f', src, '-t', ds])).code, 0);
  const served = await startServeProcess(['serve', ds, '--listen', '127.0.0.1:0'], { env, cwd: home });
  const page = await browser.context.newPage();
  try {
    for (const [i, id] of ids.entries()) {
      await page.goto(new URL('/#/m/default/runs', served.url).href);
      await page.locator('.runrow').filter({ has: page.locator(`a[title="${id}"]`) }).locator('a').click();
      await page.waitForSelector('article.step, #main .error');
      assert.is(await page.textContent('section.run h2'), id);
      assert.is(await page.textContent('article.step .msg'), `hello ${i}`);
    }
  } finally {
    await page.close();
    await served.stop();
  }
});

test('a run of big tool outputs: the page takes its steps in pages of bounded size and shows every one as it scrolls', async () => {
  const atif = join(home, 'big.atif.json');
  writeBigRun(atif, 'big', 12, 1024 * 1024);
  const ds = join(home, 'big');
  assert.is((await run(['import', '-f', atif, '-t', ds])).code, 0);
  const big = await startServeProcess(['serve', ds, '--listen', '127.0.0.1:0'], { env, cwd: home });
  const page = await browser.context.newPage();
  const sizes: Array<Promise<number>> = [];
  page.on('response', (response) => {
    if (response.url().includes('/steps?')) sizes.push(response.body().then((b) => b.length));
  });
  try {
    await page.goto(new URL('/#/m/default/run/big', big.url).href);
    await page.waitForSelector('article.step');
    // Scrolled to the end until no more steps come (each page's rest loads as it nears the screen).
    let shown = 0;
    for (let tries = 0; tries < 60 && shown < 12; tries++) {
      await page.evaluate(() => window.scrollTo(0, document.body.scrollHeight));
      await page.waitForTimeout(250);
      shown = await page.locator('article.step').count();
    }
    assert.equal(await page.locator('article.step').evaluateAll((els) => els.map((e) => (e as HTMLElement).dataset.step)), Array.from({ length: 12 }, (_, i) => String(i + 1)));
    const bytes = await Promise.all(sizes);
    assert.ok(bytes.length > 1 && bytes.every((b) => b <= 8 * 1024 * 1024 + 4096), `pages of ${bytes.join(', ')} bytes`);
  } finally {
    await page.close();
    await big.stop();
  }
});

test('the page fetched nothing from anywhere but the server', () => {
  assert.equal(offServer, []);
});

test.run();
