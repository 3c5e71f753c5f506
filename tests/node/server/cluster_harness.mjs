// What the cluster tests share: a free loopback port, and a redis-server of their own on one.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function freePort() {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  server.close();
  await once(server, 'close');
  return port;
}

export async function startRedis() {
  const port = await freePort();
  const child = spawn(process.env.DEEPINFER_REDIS_SERVER ?? 'redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly',
                                       'no', '--logfile', '/dev/null'], { stdio: 'ignore' });
  for (const deadline = Date.now() + 10000; Date.now() < deadline; await sleep(20)) {
    const socket = net.connect(port, '127.0.0.1');
    const up = await new Promise((resolve) => {
      socket.once('connect', () => resolve(true));
      socket.once('error', () => resolve(false));
    });
    socket.destroy();
    if (up) return { url: `redis://127.0.0.1:${port}`, child };
  }
  child.kill('SIGKILL');
  throw new Error('redis-server did not start');
}

