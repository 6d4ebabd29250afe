/** `trajstore drop DATASET [--yes]`: permanently remove a local dataset (pipelines/drop). */
import { InvalidInputError } from '../kit/errors.js';
import type { CommandSpec } from '../kit/program.js';
import { confirm } from './confirm.js';

export const dropCommand: CommandSpec = {
  name: 'drop <dataset>',
  description: 'permanently remove a local dataset directory (asks first on a terminal; else needs --yes)',
  options: [{ flags: '--yes', description: 'do not ask; required when not on a terminal' }],
  examples: ['trajstore drop ./old-ds --yes'],
  async run(ctx, { positional, options }) {
    const { resolveDataset } = await import('../../pipelines/pins/resolve.js');
    const { localPathOf } = await import('../../pipelines/dataset/open.js');
    const { checkDropTarget, dropDataset } = await import('../../pipelines/drop/index.js');
    const arg = positional[0] as string;
    const location = await resolveDataset(arg, { config: ctx.config, env: process.env, purpose: 'write' });
    const target = await checkDropTarget(localPathOf(location), process.env);
    if (options.yes !== true) {
      const question = `Permanently delete the ${target.manifest.kind} dataset ${target.path} (snapshot ${target.manifest.snapshot_id})?`;
      if (!(ctx.stdin as NodeJS.ReadStream).isTTY || !(ctx.stderr as NodeJS.WriteStream).isTTY) {
        throw new InvalidInputError(`drop ${arg}: refusing to delete without confirmation`, { hint: 'pass --yes to confirm when not on a terminal' });
      }
      // Declining is the same rejection as giving no confirmation at all (as for import --mode replace).
      if (!(await confirm(ctx, question))) throw new InvalidInputError(`drop ${arg}: not confirmed; nothing deleted`);
    }
    dropDataset(target);
    ctx.stdout.write(`dropped ${target.path}\n`);
  },
};
