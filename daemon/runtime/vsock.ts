/**
 * The VMM's hybrid vsock socket (Firecracker's contract): connect to the Unix socket, write
 * `CONNECT <port>\n`, read `OK <n>\n`; from then on the stream is the guest service's.
 */
import { connect, type Socket } from 'node:net';

export const EXECD_PORT = 44772;
export const EGRESS_PORT = 18080;
/** The bootstrap's control channel: a guest connection to host port P lands on `<vsock>_P`. */
export const GUEST_CONTROL_PORT = 44770;

export function connectGuestPort(vsockPath: string, port: number, timeoutMs = 10_000): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(vsockPath);
    let line = '';
    const timer = setTimeout(() => fail(new Error(`vsock port ${port}: no answer within ${timeoutMs} ms`)), timeoutMs);
    function fail(error: Error): void {
      clearTimeout(timer);
      socket.destroy();
      reject(error);
    }
    socket.once('connect', () => socket.write(`CONNECT ${port}\n`));
    socket.once('error', fail);
    socket.once('close', () => fail(new Error(`vsock port ${port}: refused (connection closed)`)));
    const onData = (chunk: Buffer): void => {
      const nl = chunk.indexOf(10);
      if (nl < 0) {
        line += chunk.toString('latin1');
        if (line.length > 64) fail(new Error(`vsock port ${port}: malformed handshake`));
        return;
      }
      line += chunk.subarray(0, nl).toString('latin1');
      socket.off('data', onData);
      socket.removeAllListeners('close');
      socket.removeListener('error', fail);
      clearTimeout(timer);
      if (!/^OK \d+$/.test(line)) {
        socket.destroy();
        return reject(new Error(`vsock port ${port}: handshake answered ${JSON.stringify(line)}`));
      }
      const rest = chunk.subarray(nl + 1);
      if (rest.length > 0) socket.unshift(rest);
      socket.pause();
      resolve(socket);
    };
    socket.on('data', onData);
  });
}
