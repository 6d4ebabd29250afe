/** `trajstore drop DATASET [--yes]`: permanently remove a dataset, local or on object storage. */
import { InvalidInputError } from '../../lib/errors.js';
import { checkDrop, drop } from '../../pipelines/index.js';
import { defineCommand } from '../kit/program.js';
import { LOCK_TIMEOUT_OPTION, lockTimeoutOf, resolveContext } from './common.js';
import { canAsk, confirm } from './confirm.js';

interface DropFlags {
  dataset: string;
  yes: boolean;
  lockTimeoutMs: number;
}

export const dropCommand = defineCommand({
  name: 'drop <dataset>',
  description: 'permanently remove a dataset: a local directory or an object-storage prefix (asks first on a terminal; else needs --yes)',
  options: [{ flags: '--yes', description: 'do not ask; required when not on a terminal' }, LOCK_TIMEOUT_OPTION],
  examples: ['trajstore drop ./old-ds --yes'],
  flags: (args): DropFlags => ({ dataset: args.requiredPositional(0, 'DATASET'), yes: args.has('--yes'), lockTimeoutMs: lockTimeoutOf(args) }),
  async run(ctx, { dataset, yes, lockTimeoutMs }) {
    const target = await checkDrop(resolveContext(ctx), dataset);
    if (!yes) {
      if (!canAsk(ctx)) throw new InvalidInputError(`drop ${dataset}: refusing to delete without confirmation`, { hint: 'pass --yes to confirm when not on a terminal' });
      const question = target.manifest
        ? `Permanently delete the ${target.manifest.kind} dataset ${target.path} (snapshot ${target.manifest.snapshot_id})?`
        : `Permanently delete what an interrupted drop left of the dataset ${target.path}?`;
      // Declining is the same rejection as giving no confirmation at all (as for import --mode replace).
      if (!(await confirm(ctx, question))) throw new InvalidInputError(`drop ${dataset}: not confirmed; nothing deleted`);
    }
    await drop(target, { lockTimeoutMs, signal: ctx.signal, log: ctx.log });
    ctx.stdout.write(`dropped ${target.path}\n`);
  },
});
