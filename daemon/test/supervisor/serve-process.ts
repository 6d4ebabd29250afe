/**
 * The real daemon on the test supervisor as a process of its own, on a state directory and cgroup
 * root the caller keeps, so that crash tests can kill it with -9 and start it again:
 *
 *   SVC_API_KEY=... node dist/daemon/test/supervisor/serve-process.js '<ServeOptions JSON without apiKey>'
 *
 * prints `listening <url>`. Test code only.
 */
import { exitCodeOf } from '../../../lib/errors.js';
import { Logger } from '../../../lib/log.js';
import { startDaemon, type ServeOptions } from '../../index.js';
import { testPreflight } from './fixture.js';
import { testSupervisorLauncher } from './launcher.js';

const options = JSON.parse(process.argv[2] ?? '{}') as Omit<ServeOptions, 'apiKey'>;
// A refused start exits as `sandboxd serve` does: its message on stderr, its exit code.
const daemon = await startDaemon({ ...options, apiKey: process.env.SVC_API_KEY ?? '' }, { launcher: testSupervisorLauncher, preflight: testPreflight }, new Logger('warn')).catch(
  (error: Error) => {
    process.stderr.write(`sandboxd: error: ${error.message}\n`);
    process.exit(exitCodeOf(error));
  },
);
process.stdout.write(`listening ${daemon.url}\n`);
process.once('SIGTERM', () => void daemon.close().then(() => process.exit(0)));
