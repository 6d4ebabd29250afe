/**
 * Headless Chromium (Debian's `chromium`, installed by scripts/setup.sh) driven by playwright-core,
 * for the web interface tests and benchmark: a fresh profile each time, and none of Chromium's own
 * network traffic (updates, sync, background requests), so a page reaches only what it asks for.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

export const CHROMIUM_FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

export interface Browser {
  context: BrowserContext;
  close(): Promise<void>;
}

export async function launchChromium(viewport = { width: 1280, height: 900 }): Promise<Browser> {
  const profile = mkdtempSync(join(tmpdir(), 'chromium-profile-'));
  // A persistent context is the one way to give Chromium our own --user-data-dir: a fresh one.
  const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: CHROMIUM_FLAGS, viewport });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
