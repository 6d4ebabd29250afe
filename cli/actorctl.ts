#!/usr/bin/env node
import { actorCommand } from './actorctl/actor.js';
import { benchCommand } from './actorctl/bench.js';
import { callCommand } from './actorctl/call.js';
import { certCaCommand, certClientCommand, certNodeCommand } from './actorctl/cert.js';
import { inspectActorsCommand } from './actorctl/inspect-actors.js';
import { inspectClusterCommand } from './actorctl/inspect-cluster.js';
import { inspectMetricsCommand } from './actorctl/inspect-metrics.js';
import { inspectWatchCommand } from './actorctl/inspect-watch.js';
import { ACTORCTL_CONFIG } from './actorctl/settings.js';
import { main } from './kit/program.js';

await main({
  name: 'actorctl',
  description: 'actorctl: run actor-system nodes, serve chat completions, inspect clusters and load-test endpoints',
  commands: [actorCommand, inspectClusterCommand, inspectActorsCommand, inspectMetricsCommand, inspectWatchCommand, callCommand, certCaCommand, certNodeCommand, certClientCommand, benchCommand],
  config: ACTORCTL_CONFIG,
});
