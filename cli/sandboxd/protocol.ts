/** `sandboxd protocol`: the lifecycle protocol profile this daemon implements. */
import { PROTOCOL_PROFILE } from '../../daemon/index.js';
import { defineCommand } from '../kit/program.js';

export const protocolCommand = defineCommand({
  name: 'protocol',
  description: 'print the lifecycle protocol profile',
  flags: () => ({}),
  async run(ctx) {
    ctx.stdout.write(`${PROTOCOL_PROFILE}\n`);
  },
});
