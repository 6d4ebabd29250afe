/**
 * Runs trajstore on a pseudo-terminal (util-linux `script`), as a person at a terminal would, and
 * types an answer once it asks `[y/N]`; a command that never asks just runs to its end.
 */
import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { DIST_ROOT } from '../../../cli/test/helpers/run-tool.js';

export const hasScript = spawnSync('script', ['--version']).status === 0;

const quote = (arg: string) => `'${arg.replaceAll("'", `'\\''`)}'`;

export function trajstoreOnTerminal(args: string[], answer: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; output: string }> {
  const command = [process.execPath, join(DIST_ROOT, 'cli', 'trajstore.js'), ...args].map(quote).join(' ');
  return new Promise((resolve, reject) => {
    const child = spawn('script', ['-qec', command, '/dev/null'], { env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
    let output = '';
    let answered = false;
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
      if (!answered && output.includes('[y/N]')) {
        answered = true;
        child.stdin.write(`${answer}\n`);
      }
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, output }));
    setTimeout(() => child.kill('SIGKILL'), 60_000).unref();
  });
}
