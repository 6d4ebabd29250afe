#!/usr/bin/env node
import { actorCommand } from './actorctl/actor.js';
import { benchCommand } from './actorctl/bench.js';
import { inspectActorsCommand } from './actorctl/inspect-actors.js';
import { inspectClusterCommand } from './actorctl/inspect-cluster.js';
import { inspectMetricsCommand } from './actorctl/inspect-metrics.js';
import { inspectWatchCommand } from './actorctl/inspect-watch.js';
import { main } from './kit/program.js';

await main({
  name: 'actorctl',
  description: 'actorctl: run actor-system nodes, serve chat completions, inspect clusters and load-test endpoints',
  commands: [actorCommand, inspectClusterCommand, inspectActorsCommand, inspectMetricsCommand, inspectWatchCommand, benchCommand],
});
