#!/usr/bin/env node
import { main } from './kit/program.js';
import { firmwareBuildCommand } from './sandboxd/firmware-build.js';
import { imagePrepareCommand } from './sandboxd/image-prepare.js';
import { protocolCommand } from './sandboxd/protocol.js';
import { serveCommand } from './sandboxd/serve.js';

await main({
  name: 'sandboxd',
  description: 'sandboxd: run agent sandboxes as KVM virtual machines behind an OpenSandbox-compatible API',
  commands: [serveCommand, protocolCommand, imagePrepareCommand, firmwareBuildCommand],
  // The daemon's serve flags are not yet settings of the file; relative paths are relative to the file.
  config: { '': { images_dir: 'path', library_dir: 'path' } },
});
