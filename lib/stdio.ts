/**
 * stdout and stderr as the tools use them: text written at once, synchronously, to the file
 * descriptor. Node's own `process.stdout`/`process.stderr` are made on first use and cost every
 * command milliseconds of start-up (a stream, and for a pipe a socket), so they are made only for
 * what needs a real stream: piping large output with backpressure, or a prompt on a terminal.
 *
 * Writes are synchronous, as Node's are for files, pipes and terminals on Linux, so text written
 * here and through the stream keeps its order.
 */
import { fstatSync, writeSync } from 'node:fs';

/** A short sleep without an event loop, while a non-blocking descriptor is full. */
function pause(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

export class Output {
  private tty: boolean | undefined;
  private watched = false;

  constructor(
    readonly fd: 1 | 2,
    /** Called when the reader went away (EPIPE); stdout ends the process, stderr drops the text. */
    private readonly onClosed: () => void,
  ) {}

  get isTTY(): boolean {
    // Only a character device can be a terminal; node:tty (which loads net and the streams) is asked
    // only then, so a pipe or a file never pays for it.
    this.tty ??= fstatSync(this.fd).isCharacterDevice() && (process.getBuiltinModule('node:tty') as typeof import('node:tty')).isatty(this.fd);
    return this.tty;
  }

  /** The terminal's width, when this is a terminal. */
  get columns(): number | undefined {
    return this.isTTY ? this.stream.columns : undefined;
  }

  /** Node's stream on this descriptor, made now if it was not yet. */
  get stream(): NodeJS.WriteStream {
    const stream = this.fd === 1 ? process.stdout : process.stderr;
    if (!this.watched) {
      this.watched = true;
      stream.on('error', (error: NodeJS.ErrnoException) => {
        if (error.code === 'EPIPE') this.onClosed();
        // Another listener is the writer's own (an export to stdout), which fails the command with it
        // (ENOSPC on a full device: exit 5); thrown from here it would be an uncaught exception.
        else if (stream.listenerCount('error') === 1) throw error;
      });
    }
    return stream;
  }

  write(chunk: string | Uint8Array): boolean {
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk;
    let offset = 0;
    while (offset < bytes.length) {
      try {
        offset += writeSync(this.fd, bytes, offset, bytes.length - offset);
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        // A descriptor someone else made non-blocking is full: wait for the reader.
        if (code === 'EAGAIN') pause(1);
        else if (code === 'EPIPE') {
          this.onClosed();
          return false;
        } else throw error;
      }
    }
    return true;
  }
}

/** The process's stdout: a reader that went away (`| head`) ends the command, which is not an error of ours. */
export const stdout = new Output(1, () => process.exit(process.exitCode ?? 0));
/** The process's stderr: text nobody reads any more is dropped. */
export const stderr = new Output(2, () => undefined);
