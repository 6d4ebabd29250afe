#!/usr/bin/env node
import { main } from './kit/program.js';

await main({
  name: 'actorctl',
  description: 'actorctl: run actor-system nodes, serve chat completions, inspect clusters and load-test endpoints',
  commands: [],
});
