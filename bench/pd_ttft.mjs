// Prefill/decode disaggregation against one server, on loopback: TTFT (request sent -> first
// streamed token), the time to the second token (on a split cluster the decode worker's first,
// after the KV moved) and end-to-end time of the same greedy streaming chat completions sent, in turn,
// one at a time, to a single `deepinfer serve`, to a router over one role-both worker, and to
// routers over one prefill + one decode worker with the KV pushed over TCP and through the shared
// store; and whether each answer equals the single server's. Starts a redis-server per cluster,
// the workers and the routers; every process in batch-invariant mode (identical outputs) on one
// thread.
//   node bench/pd_ttft.mjs [--cli build/bin/deepinfer] [--model models/default] [--requests 50]
//                          [--max-tokens 16] [--prompt-words N]
// --prompt-words N: prompts of about 1.3 N tokens more (N words of filler before the question),
// where moving the KV takes longer. --cli-before B: one more target, a push cluster whose every
// process runs the binary B (an earlier build), measured in the same run.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pct, startListening, startRedisServer, timedChat } from './cluster_bench.mjs';

const flag = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : fallback;
};
const cli = flag('--cli', 'build/bin/deepinfer');
const model = flag('--model', 'models/default');
const requests = Number(flag('--requests', '50'));
const maxTokens = Number(flag('--max-tokens', '16'));
const promptWords = Number(flag('--prompt-words', '0'));
const cliBefore = flag('--cli-before', null);
const children = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const start = (args, binary = cli) => startListening(binary, args, children);
const redis = () => startRedisServer(children);

// A prompt of about 60 tokens, different from the first token on (no prefix-cache hits).
const filler = Array.from({ length: promptWords }, (_, w) => ['alpha', 'beta', 'gamma', 'delta'][w % 4]).join(' ');
const prompt = (i) => `Request ${i}: ${filler} write a Python function that parses a CSV file with a header row, ` +
                      'converts every numeric column to floats, skips empty lines, and returns a list of ' +
                      'dictionaries; then explain the edge cases it handles.';

const run = (url, i) => timedChat(url, prompt(i), maxTokens);

const store = fs.mkdtempSync(path.join(os.tmpdir(), 'deepinfer-pd-bench-'));
try {
  const common = ['--model', model, '--port', '0', '--served-model-name', 'm', '--batch-invariant', '--block-size', '16',
                  '--threads', '1'];
  const routerArgs = (url) => ['router', '--redis', url, '--model', model, '--port', '0', '--served-model-name', 'm',
                               '--block-size', '16', '--registry-poll-ms', '100'];
  // Each target a cluster of its own, so no worker sees a prompt twice (no prefix-cache hits).
  const targets = { single: await start(['serve', ...common]) };
  const wholeRedis = await redis();
  await start(['serve', ...common, '--register', wholeRedis]);
  targets['router, role both'] = await start(routerArgs(wholeRedis));
  for (const mode of ['push', 'store']) {
    const url = await redis();
    for (const role of ['prefill', 'decode']) {
      await start(['serve', ...common, '--register', url, '--role', role, '--kv-cache-dir', path.join(store, mode)]);
    }
    targets[`P/D, ${mode}`] = await start([...routerArgs(url), '--kv-transfer', mode]);
  }
  if (cliBefore) {
    const url = await redis();
    for (const role of ['prefill', 'decode']) {
      await start(['serve', ...common, '--register', url, '--role', role, '--kv-cache-dir',
                   path.join(store, 'push-before')], cliBefore);
    }
    targets['P/D, push, --cli-before'] = await start([...routerArgs(url), '--kv-transfer', 'push'], cliBefore);
  }
  await sleep(1500);  // the routers list the workers
  const names = Object.keys(targets);
  for (let i = 0; i < 5; ++i) for (const name of names) await run(targets[name], -1 - i);  // warm-up
  const results = Object.fromEntries(names.map((n) => [n, []]));
  for (let i = 0; i < requests; ++i) {
    for (const name of names) results[name].push(await run(targets[name], i));
  }
  console.log(`${requests} streamed greedy chat completions per target, in turn, one at a time ` +
              `(${promptWords > 0 ? `about ${60 + Math.round(promptWords * 1.3)}` : 'about 60'} prompt tokens, ` +
              `max_tokens ${maxTokens})`);
  console.log('| target | TTFT p50 ms | TTFT p90 ms | second token p50 ms | first -> second token p50 ms | ' +
              'end-to-end p50 ms | outputs equal to single |');
  console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const name of names) {
    const r = results[name];
    const same = r.filter((x, i) => x.text === results.single[i].text).length;
    console.log(`| ${name} | ${pct(r.map((x) => x.ttftMs), 0.5).toFixed(2)} | ${pct(r.map((x) => x.ttftMs), 0.9).toFixed(2)} | ` +
                `${pct(r.map((x) => x.secondMs), 0.5).toFixed(2)} | ` +
                `${pct(r.map((x) => x.secondMs - x.ttftMs), 0.5).toFixed(2)} | ${pct(r.map((x) => x.e2eMs), 0.5).toFixed(2)} | ` +
                `${same}/${r.length} |`);
  }
} finally {
  for (const child of children.reverse()) child.kill('SIGTERM');
  await sleep(500);
  fs.rmSync(store, { recursive: true, force: true });
}
