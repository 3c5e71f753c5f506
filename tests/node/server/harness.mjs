// Starts `deepinfer serve` on a free loopback port for the server tests (DEEPINFER_CLI and
// DEEPINFER_SERVER_MODEL come from CTest) and stops it, failing when it did not exit cleanly.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';

export const MODEL = 'tiny';

// node's test report keeps only "fetch failed" or the clients' "Connection error.": a failed
// fetch (the API clients fetch too) prints its cause and the running servers' recent logs.
const running = new Set();
const plainFetch = globalThis.fetch;
globalThis.fetch = async (input, init) => {
  try {
    return await plainFetch(input, init);
  } catch (error) {
    if (error?.name !== 'AbortError') {
      const cause = error?.cause;
      console.error(`fetch ${init?.method ?? 'GET'} ${input} failed at ${new Date().toISOString()}: ` +
                    `${error?.message}; cause: ${cause?.code ?? ''} ${cause?.message ?? cause}`);
      for (const server of running) console.error(`${server.url} stderr (tail):\n${server.stderr().slice(-3000)}`);
    }
    throw error;
  }
};

// env: extra environment variables (e.g. DEEPINFER_FAULT, the failure-injection test hook).
export async function startServer(extraArgs = [], model = process.env.DEEPINFER_SERVER_MODEL, env = {}) {
  if (!model) throw new Error('set DEEPINFER_CLI and DEEPINFER_SERVER_MODEL (CTest does)');
  return startCommand(['serve', '--model', model, '--port', '0', '--served-model-name', MODEL, '--threads', '1',
                       '--block-size', '16', '--kv-cache-bytes', String(64 << 20), '--check-invariants', ...extraArgs],
                      env);
}

// Any deepinfer command that prints "listening on http://..." (serve, router): started, its URL
// read, stopped with SIGTERM.
export async function startCommand(args, env = {}) {
  const cli = process.env.DEEPINFER_CLI;
  if (!cli) throw new Error('set DEEPINFER_CLI (CTest does)');
  const child = spawn(cli, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const url = await new Promise((resolve, reject) => {
    let stdout = '';
    const timer = setTimeout(() => reject(new Error(`server did not start in 30 s: ${stderr}`)), 30000);
    child.stdout.on('data', (d) => {
      stdout += d;
      const m = stdout.match(/listening on (http:\/\/\S+)/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`server exited (${code ?? signal}) before listening: ${stderr}`));
    });
  });
  const server = {
    url,
    child,
    stderr: () => stderr,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`server died (${child.exitCode ?? child.signalCode}): ${stderr}`);
      }
      child.kill('SIGTERM');
      const [code, signal] = await once(child, 'exit');
      if (code !== 0) throw new Error(`server exited with ${code ?? signal} on SIGTERM: ${stderr}`);
    },
  };
  running.add(server);
  child.on('exit', () => running.delete(server));
  return server;
}

// One raw HTTP/1.1 exchange over a fresh socket: the bytes as written, the response as read
// until the server closes or `untilClose` is false and a full response arrived.
export async function rawExchange(url, bytes, { timeoutMs = 10000 } = {}) {
  const { hostname, port } = new URL(url);
  const socket = net.connect(Number(port), hostname);
  await once(socket, 'connect');
  socket.write(bytes);
  let data = '';
  socket.on('data', (d) => { data += d.toString('latin1'); });
  const timer = setTimeout(() => socket.destroy(), timeoutMs);
  await Promise.race([once(socket, 'close'), once(socket, 'end')]);
  clearTimeout(timer);
  socket.destroy();
  return data;
}

// GET /metrics parsed into {name{labels}: value}.
export async function metrics(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

// Polls /metrics until the engine is idle: nothing waiting or running and no KV in use.
export async function waitIdle(url, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const m = await metrics(url);
    if (m.deepinfer_num_requests_running === 0 && m.deepinfer_num_requests_waiting === 0 &&
        m.deepinfer_kv_cache_usage_ratio === 0) return m;
    if (Date.now() > deadline) throw new Error(`engine not idle: ${JSON.stringify(m)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
