/**
 * A preload (`node --import`) that records every module the process loads and, at exit, writes
 * their URLs one per line to $RECORD_MODULES_TO: how the start-up tests see what a tool loaded.
 */
import { writeFileSync } from 'node:fs';
import { registerHooks } from 'node:module';

const target = process.env.RECORD_MODULES_TO;
if (!target) throw new Error('record-modules: set RECORD_MODULES_TO to the file to write');
const loaded: string[] = [];
registerHooks({
  load(url, context, nextLoad) {
    loaded.push(url);
    return nextLoad(url, context);
  },
});
process.on('exit', () => writeFileSync(target, `${loaded.join('\n')}\n`));
