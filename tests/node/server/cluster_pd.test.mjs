// Prefill/decode disaggregation on loopback: redis-server (started here), two routers (one per KV
// transfer mode: push over TCP, and the shared store) over two `--role prefill` and two
// `--role decode` workers of the default model in batch-invariant mode, every worker's persistent
// KV store on one shared directory. Oracle: one plain `deepinfer serve`; the official openai and
// @anthropic-ai/sdk clients through either router get its answers exactly, streamed or not, usage
// included. Prefill workers restarted with an empty device cache still hit the prompt through the
// shared store (cached_tokens > 0). A decode worker killed with SIGKILL mid-stream ends that stream
// with an error event (no hang) while the other decode worker keeps serving. A third router (push,
// round-robin, so that each decode worker is chosen in turn) meets decode workers planted in the
// registry: one whose KV port nobody listens on (the push fails after the first token) and one
// whose token API nobody listens on (it fails before its first event); another decode worker
// computes the prompt again and the answer is still the single server's. Requests with n = 2 go
// through a prefill worker (sample 0) and a decode worker (the samples forked there) and equal the
// single server's samples; with sample 0 ended at its first token the decode worker runs them whole. A second small cluster (its own
// redis-server as registry and as the KV store's Redis tier, `--kv-cache-backend redis://`) runs the
// store mode through Redis: the decode worker loads the prompt's pages from it, and a restarted
// prefill worker hits them there. A third router (push, round-robin) meets prefill workers planted
// in the registry that relay a real prefill worker's first token and then cut the connection: a
// decode worker computes the prompt again and the answer is the single server's, greedy and seeded;
// without the first token's seed the error says it was lost. A cluster of prefill and decode
// workers of two engines each registers every rank as its own worker, the ranks of one worker
// named as one DP group, and answers as the single server.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { anthropic, chatStream, freePort, openai, redisCommand, startRedis } from './cluster_harness.mjs';
import { MODEL, metrics, startCommand, startServer } from './harness.mjs';

const model = process.env.DEEPINFER_DEFAULT_MODEL;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let redis;
let storeDir;
let oracle;
const routers = {};  // by KV transfer mode
let roundRobin;  // push mode, decode workers in turn: the failover tests'
let prefills = [];
let decodes = [];
// --kv-cache-load always: a store hit is loaded whatever the cost guard's timing on a busy machine.
const workerArgs = (role) => ['--batch-invariant', '--register', redis.url, '--role', role, '--kv-cache-dir', storeDir,
                              '--kv-cache-load', 'always'];

async function until(what, check, timeoutMs = 15000) {
  for (const deadline = Date.now() + timeoutMs; !(await check()); await sleep(50)) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
  }
}

const live = async (router) => (await metrics(router.url))['deepinfer_router_workers{state="live"}'];

before(async () => {
  redis = await startRedis();
  storeDir = fs.mkdtempSync(path.join(os.tmpdir(), 'deepinfer-pd-'));
  const routerArgs = ['router', '--redis', redis.url, '--model', model, '--port', '0', '--served-model-name', MODEL,
                      '--block-size', '16', '--registry-poll-ms', '100', '--kv-transfer'];
  [routers.push, routers.store, roundRobin, oracle, ...prefills] = await Promise.all([
    startCommand([...routerArgs, 'push']), startCommand([...routerArgs, 'store']),
    startCommand([...routerArgs, 'push', '--policy', 'round-robin']), startServer(['--batch-invariant'], model),
    startServer(workerArgs('prefill'), model), startServer(workerArgs('prefill'), model)]);
  decodes = await Promise.all([startServer(workerArgs('decode'), model), startServer(workerArgs('decode'), model)]);
  for (const router of [...Object.values(routers), roundRobin]) {
    await until('four workers listed', async () => (await live(router)) === 4);
  }
});
after(async () => {
  for (const worker of [...prefills, ...decodes]) {
    if (worker.child.exitCode === null && worker.child.signalCode === null) await worker.stop();
  }
  for (const router of [...Object.values(routers), roundRobin]) await router.stop();
  await oracle.stop();
  redis.child.kill('SIGKILL');
  fs.rmSync(storeDir, { recursive: true, force: true });
});

// Long enough for two full 16-token KV pages, so the store has something to give.
const longPrompt = 'Write a Python function that merges two sorted lists into one sorted list, explain each step, ' +
                   'and then write three unit tests for it using pytest with descriptive names.';

async function chat(server, content, extra = {}) {
  const r = await openai(server).chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content }], max_tokens: 12, temperature: 0, ...extra });
  if (r.choices.length > 1) return { choices: r.choices, usage: r.usage };
  return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason, usage: r.usage };
}

async function messages(server, stream) {
  const request = { model: MODEL, max_tokens: 12, temperature: 0,
                    messages: [{ role: 'user', content: 'Write a function that sorts a list' }] };
  if (!stream) {
    const r = await anthropic(server).messages.create(request);
    return { content: r.content, stop: r.stop_reason, usage: r.usage };
  }
  const events = [];
  for await (const event of anthropic(server).messages.stream(request)) {
    if (event.type === 'message_start') event.message.id = 'id';  // ids are random per response
    events.push(event);
  }
  return events;
}

// cached_tokens depends on what each side cached before: compared apart from the rest.
const withoutCached = ({ usage, ...rest }) => ({ ...rest, usage: { ...usage, prompt_tokens_details: undefined } });

describe('prefill/decode disaggregation', () => {
  for (const mode of ['push', 'store']) {
    test(`${mode}: chat completions and completions, streamed and not, equal one server`, async () => {
      const router = routers[mode];
      const prompts = ['Write a function number 0', 'Write a function number 1', longPrompt];
      for (const prompt of prompts) {
        assert.deepEqual(withoutCached(await chat(router, prompt)), withoutCached(await chat(oracle, prompt)), prompt);
        assert.deepEqual(withoutCached(await chatStream(router, prompt)), withoutCached(await chatStream(oracle, prompt)));
      }
      const complete = (server) => openai(server).completions.create({
        model: MODEL, prompt: 'def fibonacci(n):', max_tokens: 8, temperature: 0, logprobs: 2 });
      const [got, want] = await Promise.all([complete(router), complete(oracle)]);
      assert.equal(got.choices[0].text, want.choices[0].text);
      assert.deepEqual(got.choices[0].logprobs, want.choices[0].logprobs);
      assert.equal(got.usage.completion_tokens, want.usage.completion_tokens);
    });
  }

  test('anthropic messages, streamed and not, equal one server', async () => {
    for (const router of Object.values(routers)) {
      assert.deepEqual(await messages(router, false), await messages(oracle, false));
      assert.deepEqual(await messages(router, true), await messages(oracle, true));
    }
  });

  test('restarted prefill workers hit the prompt through the shared store', async () => {
    const want = await chat(oracle, longPrompt);
    await chat(routers.store, longPrompt);  // its pages are in the store (written before the hand-over)
    await Promise.all(prefills.map((worker) => worker.stop()));
    for (const router of Object.values(routers)) await until('the stopped prefill workers gone', async () => (await live(router)) === 2);
    prefills = await Promise.all([startServer(workerArgs('prefill'), model), startServer(workerArgs('prefill'), model)]);
    for (const router of Object.values(routers)) await until('the new prefill workers listed', async () => (await live(router)) === 4);
    for (const router of Object.values(routers)) {
      const got = await chat(router, longPrompt);
      assert.ok(got.usage.prompt_tokens_details.cached_tokens >= 32, JSON.stringify(got.usage));
      assert.deepEqual(withoutCached(got), withoutCached(want));
    }
  });

  // Plants a worker's record (a heartbeat that never advances: once marked failed it stays so), runs
  // check, and removes it again.
  async function withPlantedWorker({ role, port, kvPort = 0 }, check) {
    const record = { id: `127.0.0.1:${port}`, host: '127.0.0.1', port, role,
                     kv_port: kvPort, model: MODEL, block_size: 16, max_model_len: 2048, heartbeat: 1,
                     load: { queued_tokens: 0, num_waiting: 0, num_running: 0, kv_usage: 0, kv_tokens_used: 0,
                             kv_tokens_free: 100000, cached_tokens: 0 } };
    const key = `deepinfer:worker:${record.id}`;
    assert.match(await redisCommand(redis.url, 'SET', key, JSON.stringify(record), 'PX', '60000'), /OK/);
    try {
      await until('the planted worker listed', async () => (await live(roundRobin)) === 5);
      await check(record.id);
    } finally {
      await redisCommand(redis.url, 'DEL', key);
    }
    for (const router of [...Object.values(routers), roundRobin]) {
      await until('the planted worker gone', async () =>
        (await metrics(router.url))['deepinfer_router_workers{state="registered"}'] === 4);
    }
  }

  // Three requests in a row meet each of the three decode workers once (round-robin); the one at
  // the planted worker goes on on a real one. Every answer equals the single server's.
  async function expectFailoverTo(plantedId) {
    for (const prompt of ['Write a function number 0', 'Write a function number 1', longPrompt]) {
      assert.deepEqual(withoutCached(await chat(roundRobin, prompt)), withoutCached(await chat(oracle, prompt)), prompt);
    }
    assert.deepEqual(withoutCached(await chatStream(roundRobin, longPrompt)),
                     withoutCached(await chatStream(oracle, longPrompt)));
    const m = await metrics(roundRobin.url);
    assert.equal(m[`deepinfer_worker_routed_requests_total{worker="${plantedId}"}`], 1, JSON.stringify(m));
    assert.equal(m[`deepinfer_worker_failures_total{worker="${plantedId}"}`], 1, JSON.stringify(m));
  }

  test('push: a decode worker whose KV port is unreachable: another computes the prompt, same answer', async () => {
    await withPlantedWorker({ role: 'decode', port: await freePort(), kvPort: await freePort() }, expectFailoverTo);
  });

  test('push: a decode worker gone before its first event: another computes the prompt, same answer', async () => {
    // Its KV port is a live decode worker's, so the push succeeds; its token API is not there.
    const reply = await redisCommand(redis.url, 'GET', `deepinfer:worker:${new URL(decodes[0].url).host}`);
    const { kv_port: kvPort } = JSON.parse(reply.slice(reply.indexOf('\r\n') + 2).trim());
    assert.ok(kvPort > 0, reply);
    await withPlantedWorker({ role: 'decode', port: await freePort(), kvPort }, expectFailoverTo);
  });

  // A prefill worker that dies after its first token: it hands the router's request to a real
  // prefill worker, relays the first line of the answer (the first token, with its seed unless
  // dropSeed), then cuts the connection as a killed process would.
  async function withDyingPrefillWorker({ dropSeed = false } = {}, check) {
    const target = new URL(prefills[0].url);
    const server = http.createServer((req, res) => {
      const body = [];
      req.on('data', (chunk) => body.push(chunk));
      req.on('end', () => {
        const upstream = http.request({ host: target.hostname, port: target.port, path: req.url, method: req.method,
                                        headers: req.headers }, (answer) => {
          res.writeHead(answer.statusCode, answer.headers);
          let pending = '';
          answer.on('data', (chunk) => {
            pending += chunk;
            const newline = pending.indexOf('\n');
            if (newline < 0 || res.writableEnded) return;
            const first = JSON.parse(pending.slice(0, newline));
            assert.ok(first.first_token_seed !== undefined, 'the first token names its seed');
            if (dropSeed) delete first.first_token_seed;
            res.end(JSON.stringify(first) + '\n');  // not the chunked stream's end: the socket goes first
            res.socket.destroy();
          });
        });
        upstream.end(Buffer.concat(body));
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      await withPlantedWorker({ role: 'prefill', port: server.address().port }, check);
    } finally {
      server.close();
    }
  }

  // Three requests in a row meet each of the three prefill workers once (round-robin).
  const everyPrefillOnce = ['Write a function number 0', 'Write a function number 1', longPrompt];

  test('push: a prefill worker that fails after its first token: a decode worker computes the prompt, same answer',
       async () => {
    await withDyingPrefillWorker({}, async (plantedId) => {
      for (const prompt of everyPrefillOnce) {
        assert.deepEqual(withoutCached(await chat(roundRobin, prompt)), withoutCached(await chat(oracle, prompt)), prompt);
      }
      const m = await metrics(roundRobin.url);
      assert.equal(m[`deepinfer_worker_routed_requests_total{worker="${plantedId}"}`], 1, JSON.stringify(m));
      assert.equal(m[`deepinfer_worker_failures_total{worker="${plantedId}"}`], 1, JSON.stringify(m));
    });
    await withDyingPrefillWorker({}, async () => {  // seeded sampling, streamed
      const seeded = { temperature: 0.8, seed: 7 };
      for (const prompt of everyPrefillOnce) {
        assert.deepEqual(withoutCached(await chatStream(roundRobin, prompt, seeded)),
                         withoutCached(await chatStream(oracle, prompt, seeded)), prompt);
      }
    });
  });

  test('push: a prefill worker that fails after a first token without its seed: the error says the seed was lost',
       async () => {
    await withDyingPrefillWorker({ dropSeed: true }, async () => {
      const outcomes = [];
      for (const prompt of everyPrefillOnce) {
        outcomes.push(await chatStream(roundRobin, prompt).then(() => 'ok', (error) => error.message));
      }
      assert.equal(outcomes.filter((o) => o === 'ok').length, 2, JSON.stringify(outcomes));
      assert.match(outcomes.find((o) => o !== 'ok'), /the seed its first token was drawn with was lost/);
    });
  });

  test('n = 2 is disaggregated (sample 0 on a prefill worker, the rest forked on the decode worker) and equals '
       + 'one server; with sample 0 ended at its first token the decode worker runs it whole', async () => {
    const sampled = { n: 2, temperature: 0.8, seed: 11 };
    const complete = (server, extra = {}) => openai(server).completions.create({
      model: MODEL, prompt: 'def fibonacci(n):', max_tokens: 8, logprobs: 1, ...sampled, ...extra });
    const prefillHosts = prefills.map((w) => new URL(w.url).host);
    const routedToPrefill = async (router) => {
      const m = await metrics(router.url);
      return prefillHosts.reduce((sum, host) => sum + (m[`deepinfer_worker_routed_requests_total{worker="${host}"}`] ?? 0),
                                 0);
    };
    for (const router of Object.values(routers)) {
      const before = await routedToPrefill(router);
      const [got, want] = await Promise.all([chat(router, 'Write a function number 2', sampled),
                                             chat(oracle, 'Write a function number 2', sampled)]);
      assert.deepEqual(withoutCached(got), withoutCached(want));
      const [gotText, wantText] = await Promise.all([complete(router), complete(oracle)]);
      assert.deepEqual(gotText.choices, wantText.choices);
      assert.deepEqual(gotText.usage, wantText.usage);
      assert.equal(await routedToPrefill(router) - before, 2);
      // max_tokens 1: the prefill worker's sample 0 ends at its first token and hands nothing over.
      const [gotOne, wantOne] = await Promise.all([complete(router, { max_tokens: 1 }),
                                                   complete(oracle, { max_tokens: 1 })]);
      assert.deepEqual(gotOne.choices, wantOne.choices);
      assert.deepEqual(gotOne.usage, wantOne.usage);
    }
  });

  test('store mode through the Redis tier: the decode worker loads the pages; a new prefill worker hits them',
       async () => {
    const tierRedis = await startRedis();
    const tierArgs = (role) => ['--batch-invariant', '--register', tierRedis.url, '--role', role,
                                '--kv-cache-backend', tierRedis.url, '--kv-cache-load', 'always'];
    const started = [];
    const start = async (promise) => { const server = await promise; started.push(server); return server; };
    try {
      const [router, prefill, decode] = await Promise.all([
        start(startCommand(['router', '--redis', tierRedis.url, '--model', model, '--port', '0', '--served-model-name',
                            MODEL, '--block-size', '16', '--registry-poll-ms', '100', '--kv-transfer', 'store'])),
        start(startServer(tierArgs('prefill'), model)), start(startServer(tierArgs('decode'), model))]);
      await until('two workers listed', async () => (await live(router)) === 2);
      const want = await chat(oracle, longPrompt);
      assert.deepEqual(withoutCached(await chat(router, longPrompt)), withoutCached(want));
      const loaded = (await metrics(decode.url))['deepinfer_kv_store_pages_loaded_total'];
      assert.ok(loaded >= 2, `the decode worker loaded ${loaded} pages from the Redis tier`);
      await prefill.stop();
      // Gone from the listing first: a listing from before its key was deleted also counts two.
      await until('the stopped prefill worker gone', async () => (await live(router)) === 1);
      await start(startServer(tierArgs('prefill'), model));
      await until('the new prefill worker listed', async () => (await live(router)) === 2);
      const got = await chat(router, longPrompt);
      assert.ok(got.usage.prompt_tokens_details.cached_tokens >= 32, JSON.stringify(got.usage));
      assert.deepEqual(withoutCached(got), withoutCached(want));
    } finally {
      for (const server of started) {
        if (server.child.exitCode === null && server.child.signalCode === null) await server.stop();
      }
      tierRedis.child.kill('SIGKILL');
    }
  });

  test('prefill and decode workers of two engines each: every rank a worker of one DP group, same answers',
       async () => {
    const dpRedis = await startRedis();
    const dpArgs = (role) => ['--batch-invariant', '--register', dpRedis.url, '--role', role,
                              '--data-parallel-size', '2'];
    const started = [];
    const start = async (promise) => { const server = await promise; started.push(server); return server; };
    try {
      const [router] = await Promise.all([
        start(startCommand(['router', '--redis', dpRedis.url, '--model', model, '--port', '0', '--served-model-name',
                            MODEL, '--registry-poll-ms', '100', '--policy', 'round-robin'])),
        start(startServer(dpArgs('prefill'), model)), start(startServer(dpArgs('decode'), model))]);
      await until('four ranks listed', async () => (await live(router)) === 4);
      const reply = await redisCommand(dpRedis.url, 'KEYS', 'deepinfer:worker:*');
      const ids = [...reply.matchAll(/deepinfer:worker:(\S+)/g)].map((m) => m[1]);
      assert.equal(ids.length, 4, reply);
      const records = [];
      for (const id of ids) {
        const value = await redisCommand(dpRedis.url, 'GET', `deepinfer:worker:${id}`);
        records.push(JSON.parse(value.slice(value.indexOf('\r\n') + 2).trim()));
      }
      for (const role of ['prefill', 'decode']) {
        const ranks = records.filter((r) => r.role === role);
        assert.deepEqual(ranks.map((r) => r.dp_rank).sort(), [0, 1], JSON.stringify(ranks));
        assert.equal(new Set(ranks.map((r) => r.dp_group)).size, 1, JSON.stringify(ranks));
        if (role === 'decode') assert.ok(ranks.every((r) => r.kv_port > 0), JSON.stringify(ranks));
      }
      for (const prompt of ['Write a function number 0', 'Write a function number 1', longPrompt,
                            'Write a function number 2']) {
        assert.deepEqual(withoutCached(await chat(router, prompt)), withoutCached(await chat(oracle, prompt)), prompt);
      }
      const m = await metrics(router.url);
      for (const id of ids) {
        assert.equal(m[`deepinfer_worker_routed_requests_total{worker="${id}"}`], 2, JSON.stringify(m));
        assert.equal(m[`deepinfer_worker_failures_total{worker="${id}"}`], 0, JSON.stringify(m));
      }
    } finally {
      for (const server of started) {
        if (server.child.exitCode === null && server.child.signalCode === null) await server.stop();
      }
      dpRedis.child.kill('SIGKILL');
    }
  });

  test('a decode worker killed mid-stream ends that stream with an error; the other keeps serving', async () => {
    const router = routers.push;
    const stream = await openai(router).chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'Write a long program' }], max_tokens: 2000,
      ignore_eos: true, temperature: 0, stream: true });
    const iterator = stream[Symbol.asyncIterator]();
    for (let i = 0; i < 4; ++i) assert.equal((await iterator.next()).done, false);  // tokens from the decode worker
    const m = await metrics(router.url);
    const busy = decodes.find((w) => m[`deepinfer_worker_outstanding_requests{worker="${new URL(w.url).host}"}`] === 1);
    assert.ok(busy, JSON.stringify(m));
    busy.child.kill('SIGKILL');
    await once(busy.child, 'exit');
    await assert.rejects((async () => { for (let r = await iterator.next(); !r.done; r = await iterator.next()); })(),
                         /failed while running the request/);
    for (const mode of ['push', 'store']) {
      assert.deepEqual(await chatStream(routers[mode], 'Write a function number 0'),
                       await chatStream(oracle, 'Write a function number 0'));
    }
  });
});
