// The processes the cluster benchmarks (pd_ttft.mjs, router_overhead.mjs) start on loopback: a
// deepinfer command until it prints its URL, and a redis-server on a free port. Each child is
// pushed onto `children` for the caller to stop.
import { spawn } from 'node:child_process';
import { freePort } from '../tests/node/server/cluster_harness.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function startListening(cli, args, children) {
  const child = spawn(cli, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  for (;;) {
    const m = out.match(/listening on (http:\/\/\S+)/);
    if (m) return m[1];
    if (child.exitCode !== null) throw new Error(`${args.join(' ')} exited`);
    await sleep(20);
  }
}

export async function startRedisServer(children) {
  const port = await freePort();
  children.push(spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
                                       '--logfile', '/dev/null'], { stdio: 'ignore' }));
  await sleep(300);
  return `redis://127.0.0.1:${port}`;
}
