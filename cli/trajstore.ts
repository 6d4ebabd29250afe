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
import { serveCommand } from './trajstore/serve.js';

await main({
  name: 'trajstore',
  description: 'trajstore: store, search, query, convert, sync and serve datasets of agent trajectories',
  commands: [...datasetCommands, listCommand, ...statsCommands, findCommand, queryCommand, dropCommand, importCommand, exportCommand, serveCommand],
});
