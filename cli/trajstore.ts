#!/usr/bin/env node
import { main } from './kit/program.js';

await main({
  name: 'trajstore',
  description: 'trajstore: store, search, query, convert, sync and serve datasets of agent trajectories',
  commands: [],
});
