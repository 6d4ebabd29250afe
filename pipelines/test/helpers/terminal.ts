/**
 * Runs trajstore on a pseudo-terminal (util-linux `script`), as a person at a terminal would, and
 * types an answer once it asks `[y/N]`; a command that never asks just runs to its end. What it
 * printed on stdout and stderr arrives together, as on a terminal.
 */
import { spawn, spawnSync } from 'node:child_process';
import { toolScript } from '../../../lib/testing/run-tool.js';

export const hasScript = spawnSync('script', ['--version']).status === 0;

const quote = (arg: string) => `'${arg.replaceAll("'", `'\\''`)}'`;

/** `columns`: the terminal's width (`stty cols`), for output that fits it. */
export function trajstoreOnTerminal(args: string[], answer: string, env: NodeJS.ProcessEnv, columns?: number): Promise<{ code: number | null; output: string }> {
  const tool = [process.execPath, toolScript('trajstore'), ...args].map(quote).join(' ');
  const command = columns === undefined ? tool : `stty cols ${columns} rows 50; ${tool}`;
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
