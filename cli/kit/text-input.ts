/**
 * The text a FILE_OR_STDIN option names (`query --file`, `agent --ask-file`): the file, or stdin
 * for `-`, read no further than a limit (a FIFO or /dev/zero never ends), and taken only when it
 * is UTF-8 without NUL bytes. Bytes that are not UTF-8 would be read as U+FFFD and silently change
 * what the text says; a NUL makes it a binary file's to an agent, and ends it early for SQLite,
 * which silently drops what follows.
 */
import { createReadStream } from 'node:fs';
import type { Readable } from 'node:stream';
import { InvalidInputError, NotFoundError } from '../../lib/errors.js';
import { readBounded } from '../../lib/streams.js';

export interface TextInput {
  /** The option, as its errors name it: `--file`. */
  flag: string;
  /** Its value: a path, or `-` for stdin. */
  file: string;
  stdin: Readable;
  maxBytes: number;
  /** What the text is, for the errors: `statement`, `question`. */
  what: string;
}

async function readBytes({ flag, file, stdin, maxBytes }: TextInput): Promise<Buffer | undefined> {
  if (file === '-') return readBounded(stdin, maxBytes);
  try {
    return await readBounded(createReadStream(file, { highWaterMark: 64 * 1024 }), maxBytes);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new NotFoundError(`${flag} ${file}: no such file`);
    throw new InvalidInputError(`${flag} ${file}: cannot read it (${code ?? (error as Error).message})`);
  }
}

export async function readTextInput(input: TextInput): Promise<string> {
  const where = `${input.flag} ${input.file}`;
  const bytes = await readBytes(input);
  if (bytes === undefined) throw new InvalidInputError(`${where}: the ${input.what} is longer than ${input.maxBytes} bytes`);
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new InvalidInputError(`${where}: the ${input.what} is not UTF-8 text`);
  }
  if (text.includes('\0')) throw new InvalidInputError(`${where}: the ${input.what} holds a NUL byte`);
  return text;
}
