#!/usr/bin/env node
import { main } from './kit/program.js';
import { firmwareBuildCommand } from './sandboxd/firmware-build.js';
import { imagePrepareCommand } from './sandboxd/image-prepare.js';
import { protocolCommand } from './sandboxd/protocol.js';
import { serveCommand } from './sandboxd/serve.js';
import { SANDBOXD_CONFIG } from './sandboxd/settings.js';

await main({
  name: 'sandboxd',
  description: 'sandboxd: run agent sandboxes as KVM virtual machines behind an OpenSandbox-compatible API',
  commands: [serveCommand, protocolCommand, imagePrepareCommand, firmwareBuildCommand],
  config: SANDBOXD_CONFIG,
});
