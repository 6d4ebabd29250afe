/**
 * Where `dataset pin` gets an access key and secret key, so that they need not be in argv
 * (where `ps` shows them to every user of the machine):
 * 1. `--ak K` / `--sk K` (the spec's shape; works, with a warning that argv is visible);
 *    `--ak-stdin` / `--sk-stdin` read the value from stdin (both: first line, then second line);
 * 2. the environment variables TRAJSTORE_ACCESS_KEY / TRAJSTORE_SECRET_KEY;
 * 3. an interactive prompt on a terminal (the secret is not echoed) when a pin needs the pair
 *    (directory-service pins) or only half of it was given.
 */
import type { Readable, Writable } from 'node:stream';
import { InterruptedError, InvalidInputError } from '../../lib/errors.js';
import { readBounded } from '../../lib/streams.js';

/** Two keys, one line each: anything longer on stdin is not what --ak-stdin/--sk-stdin expect. */
const MAX_KEYS_BYTES = 64 * 1024;

export const ACCESS_KEY_ENV = 'TRAJSTORE_ACCESS_KEY';
export const SECRET_KEY_ENV = 'TRAJSTORE_SECRET_KEY';

export interface CredentialSources {
  /** `--ak` / `--sk` as typed. */
  ak: string | undefined;
  sk: string | undefined;
  akStdin: boolean;
  skStdin: boolean;
  env: NodeJS.ProcessEnv;
  stdin: Readable;
  stderr: Writable;
  /** The pin cannot work without both (directory-service pins). */
  required: boolean;
  /** The pin can take credentials at all (s3:// and catalog://); env variables apply only then. */
  applicable: boolean;
  warn(message: string): void;
}

export interface KeyPair {
  accessKey?: string;
  secretKey?: string;
}

interface TtyInput extends Readable {
  isTTY?: boolean;
  setRawMode?(mode: boolean): unknown;
}

function flagValue(text: string | undefined, flag: string): string | undefined {
  if (text === '') throw new InvalidInputError(`${flag} is empty`);
  return text;
}

export async function readKeyPair(sources: CredentialSources): Promise<KeyPair> {
  let accessKey = flagValue(sources.ak, '--ak');
  let secretKey = flagValue(sources.sk, '--sk');
  if (sources.akStdin && accessKey !== undefined) throw new InvalidInputError('give --ak or --ak-stdin, not both');
  if (sources.skStdin && secretKey !== undefined) throw new InvalidInputError('give --sk or --sk-stdin, not both');
  if (secretKey !== undefined) {
    sources.warn(`--sk on the command line is visible to other users (ps, shell history); prefer ${SECRET_KEY_ENV} or --sk-stdin`);
  }
  if (sources.akStdin || sources.skStdin) {
    const input = await readBounded(sources.stdin, MAX_KEYS_BYTES);
    if (input === undefined) throw new InvalidInputError(`stdin: more than ${MAX_KEYS_BYTES} bytes; --ak-stdin/--sk-stdin read one line each`);
    const lines = input.toString('utf8').split(/\r?\n/);
    if (sources.akStdin) accessKey = lines.shift() ?? '';
    if (sources.skStdin) secretKey = lines.shift() ?? '';
    if (accessKey === '' || secretKey === '') throw new InvalidInputError('stdin gave an empty key (--ak-stdin/--sk-stdin read one line each)');
  }
  if (!sources.applicable) {
    if (accessKey !== undefined || secretKey !== undefined) {
      throw new InvalidInputError('--ak/--sk apply to s3:// and catalog:// pins only');
    }
    return {};
  }
  accessKey ??= sources.env[ACCESS_KEY_ENV] || undefined;
  secretKey ??= sources.env[SECRET_KEY_ENV] || undefined;
  const half = (accessKey === undefined) !== (secretKey === undefined);
  if (half || (sources.required && accessKey === undefined)) {
    const input = sources.stdin as TtyInput;
    if (!input.isTTY || !input.setRawMode) {
      throw new InvalidInputError(sources.required && !half ? 'a directory-service pin needs --ak and --sk' : '--ak and --sk must be given together', {
        hint: `give both as --ak/--sk, ${ACCESS_KEY_ENV}/${SECRET_KEY_ENV}, or --ak-stdin/--sk-stdin`,
      });
    }
    const questions: Question[] = [];
    if (accessKey === undefined) questions.push({ text: 'access key: ', echo: true });
    if (secretKey === undefined) questions.push({ text: 'secret key (not shown): ', echo: false });
    const answers = await ask(questions, input, sources.stderr);
    accessKey ??= answers.shift();
    secretKey ??= answers.shift();
    if (accessKey === '' || secretKey === '') throw new InvalidInputError('an empty key was entered');
  }
  return { ...(accessKey !== undefined ? { accessKey } : {}), ...(secretKey !== undefined ? { secretKey } : {}) };
}

interface Question {
  text: string;
  /** False: nothing of what is typed is shown. */
  echo: boolean;
}

/**
 * Asks the questions one after another on a terminal in raw mode and returns the answers. One
 * raw session for all of them: keys typed ahead (or pasted) belong to the next question.
 */
function ask(questions: Question[], input: TtyInput, output: Writable): Promise<string[]> {
  const answers: string[] = [];
  let current = '';
  output.write(questions[0]?.text ?? '');
  input.setRawMode?.(true);
  input.resume();
  return new Promise((resolve, reject) => {
    const finish = (error?: Error): void => {
      input.off('data', onData);
      input.setRawMode?.(false);
      input.pause();
      if (error) {
        output.write('\n');
        reject(error);
      } else resolve(answers);
    };
    const onData = (chunk: Buffer | string): void => {
      for (const ch of chunk.toString()) {
        const question = questions[answers.length];
        if (!question) return;
        if (ch === '\r' || ch === '\n') {
          answers.push(current);
          current = '';
          output.write('\n');
          const next = questions[answers.length];
          if (!next) return finish();
          output.write(next.text);
        } else if (ch === '\u0003' || ch === '\u0004') {
          return finish(new InterruptedError('SIGINT'));
        } else if (ch === '\u007f' || ch === '\b') {
          if (current.length > 0) {
            current = current.slice(0, -1);
            if (question.echo) output.write('\b \b');
          }
        } else if (ch >= ' ') {
          current += ch;
          if (question.echo) output.write(ch);
        }
      }
    };
    input.on('data', onData);
  });
}
