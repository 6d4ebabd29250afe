/**
 * `onboard`: which dataset the walkthrough uses and what it shows. `onboard query` (and any
 * section, when no dataset is given and there is no default dataset yet) works on temporary
 * example data, made for the walkthrough and removed after it; otherwise on the user's dataset.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ImportIO } from '../import/thread/client.js';
import { localPathOf, resolveDataset, type ResolveContext } from '../pins/resolve.js';
import { exampleDataset } from './example.js';
import { lessons, type Lesson } from './lessons.js';
import type { OnboardSection } from './sections.js';

export interface OnboardRequest {
  sections: OnboardSection[];
  /** A DATASET argument; undefined: the default dataset, or the example data. */
  dataset: string | undefined;
}

export interface Onboarding {
  /** The DATASET argument the lessons' commands use. */
  dataset: string;
  /** The walkthrough runs on temporary example data. */
  example: boolean;
  lessons: Lesson[];
  /** Removes the example data and what the lessons wrote; call it when the walkthrough ends, however it ends. */
  cleanup(): void;
}

async function defaultDatasetExists(rc: ResolveContext): Promise<string | undefined> {
  const location = await resolveDataset(undefined, { ...rc, purpose: 'read' });
  const path = localPathOf(location);
  return existsSync(join(path, 'trajstore.json')) ? path : undefined;
}

export async function prepareOnboarding(rc: ResolveContext, request: OnboardRequest, io: ImportIO): Promise<Onboarding> {
  const scratch = mkdtempSync(join(tmpdir(), 'trajstore-onboard-out-'));
  const removals = [(): void => rmSync(scratch, { recursive: true, force: true })];
  const cleanup = (): void => {
    for (const remove of removals) remove();
  };
  try {
    const onlyQuery = request.sections.length === 1 && request.sections[0] === 'query';
    let dataset = request.dataset ?? (onlyQuery ? undefined : await defaultDatasetExists(rc));
    const example = dataset === undefined;
    if (example) {
      const made = await exampleDataset(rc, io);
      removals.push(made.remove);
      dataset = made.path;
    }
    return { dataset: dataset as string, example, lessons: await lessons(rc, request.sections, dataset as string, example, scratch), cleanup };
  } catch (error) {
    cleanup();
    throw error;
  }
}
