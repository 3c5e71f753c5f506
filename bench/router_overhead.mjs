// The router's added latency: TTFT (request sent -> first streamed token) of the same streaming
// chat completion sent straight to a worker and through `deepinfer router`, alternating, one at a
// time, on loopback. Prints p50 / p90 of both and the router's added p50 (the target:
// <= 1 ms). Starts redis-server, one worker (`deepinfer serve --register`) and the router itself.
//   node bench/router_overhead.mjs [--cli build/bin/deepinfer] [--model models/default] [--requests 200]
import { pct, startListening, startRedisServer, timedChat } from './cluster_bench.mjs';

const flag = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : fallback;
};
const cli = flag('--cli', 'build/bin/deepinfer');
const model = flag('--model', 'models/default');
const requests = Number(flag('--requests', '200'));
const children = [];

const start = (args) => startListening(cli, args, children);

const ttftMs = async (url, i) => (await timedChat(url, `Write function number ${i}`, 2)).ttftMs;

try {
  const redisUrl = await startRedisServer(children);
  const worker = await start(['serve', '--model', model, '--port', '0', '--served-model-name', 'm', '--register', redisUrl]);
  const router = await start(['router', '--redis', redisUrl, '--model', model, '--port', '0', '--served-model-name', 'm']);
  for (let i = 0; i < 10; ++i) { await ttftMs(worker, i); await ttftMs(router, i); }  // warm-up
  const direct = [];
  const routed = [];
  for (let i = 0; i < requests; ++i) {
    direct.push(await ttftMs(worker, i));
    routed.push(await ttftMs(router, i));
  }
  const row = (name, xs) => `${name.padEnd(8)} TTFT p50 ${pct(xs, 0.5).toFixed(2)} ms, p90 ${pct(xs, 0.9).toFixed(2)} ms`;
  console.log(`${requests} streamed chat completions each, alternating, one at a time (max_tokens 2)`);
  console.log(row('direct', direct));
  console.log(row('router', routed));
  console.log(`router adds ${(pct(routed, 0.5) - pct(direct, 0.5)).toFixed(2)} ms at p50 ` +
              `(median of the paired differences: ${pct(routed.map((r, i) => r - direct[i]), 0.5).toFixed(2)} ms)`);
} finally {
  for (const child of children.reverse()) child.kill('SIGTERM');
}
