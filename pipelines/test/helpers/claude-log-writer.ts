/**
 * A stand-in for Claude Code writing its session logs, run as a process of its own by the sync
 * tests: `node claude-log-writer.js DIR SESSIONS LINES PAUSE_MS` appends LINES user lines to each of
 * SESSIONS session files under DIR (the agentb-code format), round robin, each line written in two
 * halves with a pause between (so a reader may see the first half alone), and prints the count.
 * Each line's text is `marker-<session>-<line>`, so a test can count what was imported.
 */
import { appendFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export const sessionIdOf = (s: number): string => `00000000-0000-4000-8000-${String(s).padStart(12, '0')}`;
const uuidOf = (s: number, n: number): string => `${String(s).padStart(8, '0')}-0000-4000-8000-${String(n).padStart(12, '0')}`;

/** One Claude Code user line of session `s`, the `n`th (from 0). */
export function claudeLine(s: number, n: number): string {
  return `${JSON.stringify({
    parentUuid: n === 0 ? null : uuidOf(s, n - 1),
    cwd: '/home/dev/project',
    sessionId: sessionIdOf(s),
    version: '2.1.140',
    type: 'user',
    uuid: uuidOf(s, n),
    timestamp: new Date(Date.UTC(2026, 4, 12, 9, 0, 0, 0) + n * 1000).toISOString(),
    message: { role: 'user', content: `marker-${s}-${n}` },
  })}\n`;
}

export const sessionFile = (dir: string, s: number): string => join(dir, 'project', `${sessionIdOf(s)}.jsonl`);

async function main(): Promise<void> {
  const [dir, sessions, lines, pause] = process.argv.slice(2);
  if (!dir || !sessions || !lines || !pause) throw new Error('usage: claude-log-writer DIR SESSIONS LINES PAUSE_MS');
  mkdirSync(join(dir, 'project'), { recursive: true });
  let written = 0;
  for (let n = 0; n < Number(lines); n++) {
    for (let s = 0; s < Number(sessions); s++) {
      const line = claudeLine(s, n);
      const half = Math.floor(line.length / 2);
      appendFileSync(sessionFile(dir, s), line.slice(0, half));
      await sleep(Number(pause) / 2);
      appendFileSync(sessionFile(dir, s), line.slice(half));
      written += 1;
    }
    await sleep(Number(pause) / 2);
  }
  process.stdout.write(`${written}\n`);
}

if (process.argv[1]?.endsWith('claude-log-writer.js')) await main();
