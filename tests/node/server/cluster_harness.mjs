// What the cluster tests share: a free loopback port, a redis-server of their own on one, one Redis
// command, the official clients pointed at a server, and a streamed greedy chat read to its end.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { MODEL } from './harness.mjs';

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


// One Redis command over a fresh connection (RESP), for records a test reads or plants itself.
export async function redisCommand(url, ...args) {
  const { hostname, port } = new URL(url);
  const socket = net.connect(Number(port), hostname);
  await once(socket, 'connect');
  socket.write(`*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join(''));
  const [reply] = await once(socket, 'data');
  socket.destroy();
  return reply.toString();
}

export const openai = (server) => new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
export const anthropic = (server) => new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });

// A greedy streamed chat completion (12 tokens unless extra says otherwise): its text, finish
// reason and usage.
export async function chatStream(server, content, extra = {}) {
  const stream = await openai(server).chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content }], max_tokens: 12, temperature: 0, stream: true,
    stream_options: { include_usage: true }, ...extra });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
    usage = chunk.usage ?? usage;
  }
  return { text, finish, usage };
}
