#!/usr/bin/env node
import { main } from './kit/program.js';
import { firmwareBuildCommand } from './sandboxd/firmware-build.js';
import { imagePrepareCommand } from './sandboxd/image-prepare.js';

await main({
  name: 'sandboxd',
  description: 'sandboxd: run agent sandboxes as KVM virtual machines behind an OpenSandbox-compatible API',
  commands: [imagePrepareCommand, firmwareBuildCommand],
  // The daemon's settings join these as it lands; relative paths are relative to the file.
  config: { '': { images_dir: 'path', library_dir: 'path' } },
});
