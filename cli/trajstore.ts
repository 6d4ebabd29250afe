#!/usr/bin/env node
import { main } from './kit/program.js';
import { datasetCommands } from './trajstore/dataset.js';
import { importCommand } from './trajstore/import.js';
import { exportCommand } from './trajstore/export.js';
import { findCommand } from './trajstore/find.js';
import { queryCommand } from './trajstore/query.js';
import { listCommand } from './trajstore/list.js';
import { statsCommands } from './trajstore/stats.js';
import { dropCommand } from './trajstore/drop.js';
import { syncCommand } from './trajstore/sync.js';
import { showCommand } from './trajstore/show.js';
import { catalogCommand } from './trajstore/catalog.js';
import { agentCommand } from './trajstore/agent.js';
import { onboardCommand } from './trajstore/onboard.js';
import { serveCommand } from './trajstore/serve.js';

await main({
  name: 'trajstore',
  description: 'trajstore: store, search, query, convert, sync and serve datasets of agent trajectories',
  commands: [...datasetCommands, listCommand, ...statsCommands, findCommand, showCommand, queryCommand, dropCommand, importCommand, exportCommand, syncCommand, serveCommand, catalogCommand, onboardCommand, agentCommand],
});
