/**
 * Development harness for end-to-end client suites (the SDK's examples, another language's SDK):
 *
 *   SVC_API_KEY=... node dist/daemon/test/harness.js --images-dir DIR [--listen 127.0.0.1:0]
 *
 * starts the real daemon (API, registry, admission, proxy, maintenance) on the test supervisor
 * with a fresh private state directory, prints `listening http://127.0.0.1:PORT`, and on SIGTERM
 * stops it, kills its sandboxes and removes its state and scratch cgroup. Test code: never in dist/bin.
 */
import { parseArgs } from 'node:util';
import { Logger } from '../../lib/log.js';
import { cgroup2Mount, makeFixture } from './supervisor/fixture.js';

const { values } = parseArgs({ options: { 'images-dir': { type: 'string' }, listen: { type: 'string', default: '127.0.0.1:0' } } });
const apiKey = process.env.SVC_API_KEY;
if (!values['images-dir']) {
  process.stderr.write('harness: --images-dir DIR is required\n');
  process.exit(2);
}
if (!apiKey) {
  process.stderr.write('harness: SVC_API_KEY must be set in the environment\n');
  process.exit(2);
}
const mount = cgroup2Mount();
if ('skip' in mount) {
  process.stderr.write(`harness: ${mount.skip}\n`);
  process.exit(6);
}
const fixture = makeFixture(mount.path, new Logger('warn'));
try {
  const daemon = await fixture.start({ imagesDir: { path: values['images-dir'], input: '--images-dir' }, listen: values.listen!, apiKey });
  process.stdout.write(`listening ${daemon.url}\n`);
  const stop = async (): Promise<void> => {
    await daemon.close();
    await fixture.cleanup();
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop());
  process.once('SIGINT', () => void stop());
} catch (error) {
  process.stderr.write(`harness: ${(error as Error).message}\n`);
  await fixture.cleanup();
  process.exit(1);
}
