/**
 * Client of a sandbox's `control.sock` (the VMM's, or the test supervisor's, which speaks the
 * same contract): one request frame `{op, id}`, one answer frame `{ok, state, error?}` carrying
 * the state the VM is confirmed to be in. No answer is uncertainty, never proof of absence.
 */
import { connect } from 'node:net';
import { randomUUID } from 'node:crypto';
import { encodeFrame, FrameDecoder } from '../framing.js';

export type ControlOp = 'inspect' | 'pause' | 'resume' | 'terminate';

export interface ControlAnswer {
  ok: boolean;
  state: string;
  error?: { code: string; message: string };
  [key: string]: unknown;
}

export function controlRequest(socketPath: string, op: ControlOp, timeoutMs = 15_000): Promise<ControlAnswer> {
  return new Promise((resolve, reject) => {
    const id = randomUUID();
    const socket = connect(socketPath);
    const decoder = new FrameDecoder();
    const timer = setTimeout(() => fail(new Error(`control ${op}: no answer within ${timeoutMs} ms`)), timeoutMs);
    function fail(error: Error): void {
      clearTimeout(timer);
      socket.destroy();
      reject(error);
    }
    socket.once('connect', () => socket.write(encodeFrame({ op, id })));
    socket.on('data', (chunk: Buffer) => {
      try {
        decoder.push(chunk);
        const frame = decoder.next();
        if (!frame) return;
        const answer = frame.value as ControlAnswer;
        if (answer.id !== undefined && answer.id !== id) return fail(new Error(`control ${op}: answer to another request`));
        clearTimeout(timer);
        socket.end();
        resolve(answer);
      } catch (error) {
        fail(error as Error);
      }
    });
    socket.once('error', (error) => fail(error));
    socket.once('close', () => fail(new Error(`control ${op}: connection closed without an answer`)));
  });
}
