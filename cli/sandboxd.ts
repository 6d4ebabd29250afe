#!/usr/bin/env node
import { main } from './kit/program.js';

await main({
  name: 'sandboxd',
  description: 'sandboxd: run agent sandboxes as KVM virtual machines behind an OpenSandbox-compatible API',
  commands: [],
});
