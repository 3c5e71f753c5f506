// The serving cluster on loopback: redis-server (started here on a free port), `deepinfer router`
// and two `deepinfer serve --register` workers on the default model in batch-invariant mode.
// Oracle: one plain `deepinfer serve` of the same model; the official openai and
// @anthropic-ai/sdk clients through the router get its answers exactly, streamed or not. Before
// any worker registers the router answers 503 naming the registry; a registered worker that
// cannot be reached has its requests re-routed to the others; a worker killed with SIGKILL
// mid-stream ends that stream with an error (no hang) while the other keeps serving; once the
// killed worker's key expires the router lists one worker and routes everything to it. The router
// takes its context length and block size from the workers' records, refuses a worker that
// differs, and does not start when its own flag contradicts the registered workers.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { anthropic, chatStream, freePort, openai, redisCommand, startRedis } from './cluster_harness.mjs';
import { MODEL, metrics, startCommand, startServer } from './harness.mjs';

const model = process.env.DEEPINFER_DEFAULT_MODEL;
// The playground's metrics module, as the page runs it: a browser ES module with no package.json
// beside it, which node 18 would load as CommonJS from its path, so it is imported as source.
const { parsePrometheus, summarize } = await import(`data:text/javascript,${encodeURIComponent(
  readFileSync(new URL('../../../src/server/ui/metrics.js', import.meta.url), 'utf8'))}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, check, timeoutMs = 15000) {
  for (const deadline = Date.now() + timeoutMs; ; await sleep(50)) {
    if (await check()) return;
    if (Date.now() > deadline) {
      const routerMetrics = Object.entries(await metrics(router.url)).filter(([k]) => /_(router|worker)_/.test(k));
      throw new Error(`timed out waiting for ${what}; the router's metrics: ${JSON.stringify(routerMetrics)}`);
    }
  }
}

let redis;
let oracle;
let router;
let workers = [];
// No --block-size or --max-model-len: the router takes both from the workers' records.
const routerArgs = (...extra) => ['router', '--redis', redis.url, '--model', model, '--port', '0',
                                  '--served-model-name', MODEL, '--registry-poll-ms', '100', '--ui', ...extra];
// A context length of the workers' own (not the model's 2048), which the router takes from them.
const workerArgs = () => ['--batch-invariant', '--max-model-len', '1024', '--register', redis.url];

before(async () => {
  redis = await startRedis();
  router = await startCommand(routerArgs());
  oracle = await startServer(['--batch-invariant', '--max-model-len', '1024'], model);
});
after(async () => {
  for (const worker of workers) {
    if (worker.child.exitCode === null && worker.child.signalCode === null) await worker.stop();
  }
  await router.stop();
  await oracle.stop();
  redis.child.kill('SIGKILL');
});

const prompts = ['def fibonacci(n):', 'import os', 'class Stack:', 'for i in range(10):'];

async function completions(server) {
  return Promise.all(prompts.map((prompt, i) => openai(server).completions.create({
    model: MODEL, prompt, max_tokens: 8, temperature: i % 2 === 0 ? 0 : 0.9, seed: i, logprobs: 2 })));
}

async function messages(server, stream) {
  const client = anthropic(server);
  const request = { model: MODEL, max_tokens: 12, temperature: 0,
                    messages: [{ role: 'user', content: 'Write a function that sorts a list' }] };
  if (!stream) {
    const r = await client.messages.create(request);
    return { content: r.content, stop: r.stop_reason, usage: r.usage };
  }
  const events = [];
  for await (const event of client.messages.stream(request)) {
    if (event.type === 'message_start') event.message.id = 'id';  // ids are random per response
    events.push(event);
  }
  return events;
}

describe('the serving cluster', () => {
  test('without workers the router answers 503 naming the registry', async () => {
    const health = await fetch(`${router.url}/health`);
    assert.equal(health.status, 503);
    assert.match(await health.text(), /no worker is registered in Redis at redis:\/\/127\.0\.0\.1/);
    await assert.rejects(openai(router).completions.create({ model: MODEL, prompt: 'x', max_tokens: 2 }),
                         (error) => error.status === 503 && /no worker is registered in Redis at redis:/.test(error.message));
    workers = await Promise.all([startServer(workerArgs(), model), startServer(workerArgs(), model)]);
    await until('both workers in the registry', async () =>
      (await metrics(router.url))['deepinfer_router_workers{state="live"}'] === 2);
    assert.equal((await fetch(`${router.url}/health`)).status, 200);
  });

  test('completions with logprobs, spread over both workers, equal one server', async () => {
    const want = await completions(oracle);
    const got = await completions(router);
    for (let i = 0; i < prompts.length; ++i) {
      assert.equal(got[i].choices[0].text, want[i].choices[0].text, prompts[i]);
      assert.deepEqual(got[i].choices[0].logprobs, want[i].choices[0].logprobs);
      assert.deepEqual(got[i].usage, want[i].usage);
    }
    const m = await metrics(router.url);
    const routed = workers.map((w) => m[`deepinfer_worker_routed_requests_total{worker="${new URL(w.url).host}"}`]);
    assert.ok(routed.every((n) => n >= 1), JSON.stringify(m));
    assert.ok(m.deepinfer_router_balance_ratio >= 1, JSON.stringify(m));
    // The router's own latency histograms and token counters, as serve's.
    assert.equal(m.deepinfer_time_to_first_token_seconds_count, prompts.length, JSON.stringify(m));
    assert.equal(m.deepinfer_generation_tokens_total, got.reduce((n, r) => n + r.usage.completion_tokens, 0));
  });

  test('a registered worker that cannot be reached: its requests go to the others', async () => {
    const deadPort = await freePort();  // nothing listens there
    const record = { id: `127.0.0.1:${deadPort}`, host: '127.0.0.1', port: deadPort, role: 'both', model: MODEL,
                     block_size: 16, max_model_len: 1024, heartbeat: 1,
                     load: { queued_tokens: 0, num_waiting: 0, num_running: 0, kv_usage: 0, kv_tokens_used: 0,
                             kv_tokens_free: 1000, cached_tokens: 0 } };
    const key = `deepinfer:worker:${record.id}`;
    assert.match(await redisCommand(redis.url, 'SET', key, JSON.stringify(record), 'PX', '60000'), /OK/);
    await until('the planted worker listed', async () =>
      (await metrics(router.url))['deepinfer_router_workers{state="live"}'] === 3);
    try {
      // Four at once: the policy spreads them over all three, so the dead one gets at least one
      // (two when a second is placed before the first's connection is refused).
      const want = await completions(oracle);
      const got = await completions(router);
      for (let i = 0; i < prompts.length; ++i) assert.equal(got[i].choices[0].text, want[i].choices[0].text);
      const m = await metrics(router.url);
      const failures = m[`deepinfer_worker_failures_total{worker="${record.id}"}`];
      assert.ok(failures >= 1 && failures === m[`deepinfer_worker_routed_requests_total{worker="${record.id}"}`],
                JSON.stringify(m));
      assert.equal(m['deepinfer_router_workers{state="live"}'], 2);
      // Marked failed: later requests never go there.
      await completions(router);
      assert.equal((await metrics(router.url))[`deepinfer_worker_routed_requests_total{worker="${record.id}"}`],
                   failures);
    } finally {
      await redisCommand(redis.url, 'DEL', key);
    }
    await until('the planted worker gone', async () =>
      (await metrics(router.url))['deepinfer_router_workers{state="registered"}'] === 2);
  });

  test('the context length and block size come from the workers; a worker that differs is refused', async () => {
    const models = await (await fetch(`${router.url}/v1/models`)).json();
    assert.equal(models.data[0].max_model_len, 1024);
    await assert.rejects(openai(router).completions.create({ model: MODEL, prompt: 'def f():', max_tokens: 1100 }),
                         (error) => error.status === 400 && /maximum context length is 1024/.test(error.message));
    const port = await freePort();
    const record = { id: `127.0.0.1:${port}`, host: '127.0.0.1', port, role: 'both', model: MODEL, block_size: 16,
                     max_model_len: 2048, heartbeat: 1,
                     load: { queued_tokens: 0, num_waiting: 0, num_running: 0, kv_usage: 0, kv_tokens_used: 0,
                             kv_tokens_free: 1000, cached_tokens: 0 } };
    const key = `deepinfer:worker:${record.id}`;
    assert.match(await redisCommand(redis.url, 'SET', key, JSON.stringify(record), 'PX', '60000'), /OK/);
    try {
      await until('the worker of another context length refused', async () =>
        (await metrics(router.url))['deepinfer_router_workers{state="refused"}'] === 1);
      assert.equal((await metrics(router.url))['deepinfer_router_workers{state="registered"}'], 2);
      assert.match(router.stderr(), new RegExp(`worker ${record.id} has --max-model-len 2048 but the workers ` +
                                               'already routed to have --max-model-len 1024'));
      // A router whose flag contradicts the registered workers does not start; it names them.
      await assert.rejects(startCommand(routerArgs('--max-model-len', '2048')),
                           /do not share one --block-size and --max-model-len[\s\S]*has --max-model-len 1024 but the router's --max-model-len is 2048/);
      await assert.rejects(startCommand(routerArgs('--block-size', '32')), /has --block-size 16 but the router's --block-size is 32/);
    } finally {
      await redisCommand(redis.url, 'DEL', key);
    }
    await until('the refused worker gone', async () =>
      (await metrics(router.url))['deepinfer_router_workers{state="refused"}'] === 0);
  });

  test('chat completions and responses, streamed and not, equal one server', async () => {
    const chat = async (server) => (await openai(server).chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'Write a function' }], max_tokens: 10, temperature: 0 }))
      .choices[0];
    assert.deepEqual(await chat(router), await chat(oracle));
    const run = (server) => Promise.all([0, 1].map((i) => chatStream(server, `Write a function number ${i}`)));
    assert.deepEqual(await run(router), await run(oracle));
    const respond = async (server) => {
      const r = await openai(server).responses.create({ model: MODEL, input: 'Write a class', max_output_tokens: 10,
                                                        temperature: 0 });
      return { text: r.output_text, usage: r.usage, status: r.status };
    };
    assert.deepEqual(await respond(router), await respond(oracle));
  });

  test('the router serves the playground, whose live figures are the workers\' reports', async () => {
    const page = await fetch(`${router.url}/`);
    assert.equal(page.status, 200);
    assert.match(await page.text(), /<title>deepinfer playground<\/title>/);
    const text = await (await fetch(`${router.url}/metrics`)).text();
    const samples = parsePrometheus(text);
    const figures = summarize(samples);
    const reported = (family) => Object.entries(samples).filter(([key]) => key.startsWith(`deepinfer_worker_reported_${family}{`));
    assert.equal(reported('running_requests').length, 2, text);
    assert.equal(figures.running, reported('running_requests').reduce((sum, [, v]) => sum + v, 0));
    assert.ok(figures.waiting >= 0 && figures.kvUsage >= 0 && figures.kvUsage <= 1, JSON.stringify(figures));
    assert.ok(samples.deepinfer_prompt_tokens_total > 0, 'the router counts the prompt tokens it sent');
    assert.ok(figures.prefixHitRate >= 0 && figures.prefixHitRate <= 1, JSON.stringify(figures));
  });

  test('anthropic messages, streamed and not, equal one server', async () => {
    assert.deepEqual(await messages(router, false), await messages(oracle, false));
    assert.deepEqual(await messages(router, true), await messages(oracle, true));
  });

  test('a worker killed mid-stream ends that stream with an error; the other keeps serving', async () => {
    const stream = await openai(router).chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'Write a long program' }], max_tokens: 1000,
      ignore_eos: true, temperature: 0, stream: true });
    const iterator = stream[Symbol.asyncIterator]();
    assert.equal((await iterator.next()).done, false);
    const m = await metrics(router.url);
    const busy = workers.find((w) => m[`deepinfer_worker_outstanding_requests{worker="${new URL(w.url).host}"}`] === 1);
    assert.ok(busy, JSON.stringify(m));
    const survivor = workers.find((w) => w !== busy);
    busy.child.kill('SIGKILL');
    await once(busy.child, 'exit');
    await assert.rejects((async () => { for (let r = await iterator.next(); !r.done; r = await iterator.next()); })(),
                         /failed while running the request/);
    // Requests go on, to the survivor, before and after the killed worker's key expires.
    const survivorHost = new URL(survivor.url).host;
    const routedBefore = (await metrics(router.url))[`deepinfer_worker_routed_requests_total{worker="${survivorHost}"}`];
    assert.deepEqual(await chatStream(router, 'Write a function number 0'), await chatStream(oracle, 'Write a function number 0'));
    await until('the killed worker leaves the registry', async () => {
      const now = await metrics(router.url);
      return now['deepinfer_router_workers{state="registered"}'] === 1 &&
             now[`deepinfer_worker_routed_requests_total{worker="${new URL(busy.url).host}"}`] === undefined;
    }, 10000);
    const answers = await completions(router);
    assert.equal(answers.length, prompts.length);
    const after = await metrics(router.url);
    assert.equal(after[`deepinfer_worker_routed_requests_total{worker="${survivorHost}"}`],
                 routedBefore + 1 + prompts.length, JSON.stringify(after));
  });
});
