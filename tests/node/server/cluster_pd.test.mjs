// Prefill/decode disaggregation on loopback: redis-server (started here), two routers (one per KV
// transfer mode: push over TCP, and the shared store) over two `--role prefill` and two
// `--role decode` workers of the default model in batch-invariant mode, every worker's persistent
// KV store on one shared directory. Oracle: one plain `deepinfer serve`; the official openai and
// @anthropic-ai/sdk clients through either router get its answers exactly, streamed or not, usage
// included. Prefill workers restarted with an empty device cache still hit the prompt through the
// shared store (cached_tokens > 0). A decode worker killed with SIGKILL mid-stream ends that stream
// with an error event (no hang) while the other decode worker keeps serving.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { anthropic, chatStream, openai, startRedis } from './cluster_harness.mjs';
import { MODEL, metrics, startCommand, startServer } from './harness.mjs';

const model = process.env.DEEPINFER_DEFAULT_MODEL;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let redis;
let storeDir;
let oracle;
const routers = {};  // by KV transfer mode
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
  [routers.push, routers.store, oracle, ...prefills] = await Promise.all([
    startCommand([...routerArgs, 'push']), startCommand([...routerArgs, 'store']), startServer(['--batch-invariant'], model),
    startServer(workerArgs('prefill'), model), startServer(workerArgs('prefill'), model)]);
  decodes = await Promise.all([startServer(workerArgs('decode'), model), startServer(workerArgs('decode'), model)]);
  for (const router of Object.values(routers)) await until('four workers listed', async () => (await live(router)) === 4);
});
after(async () => {
  for (const worker of [...prefills, ...decodes]) {
    if (worker.child.exitCode === null && worker.child.signalCode === null) await worker.stop();
  }
  for (const router of Object.values(routers)) await router.stop();
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
    prefills = await Promise.all([startServer(workerArgs('prefill'), model), startServer(workerArgs('prefill'), model)]);
    for (const router of Object.values(routers)) await until('the new prefill workers listed', async () => (await live(router)) === 4);
    for (const router of Object.values(routers)) {
      const got = await chat(router, longPrompt);
      assert.ok(got.usage.prompt_tokens_details.cached_tokens >= 32, JSON.stringify(got.usage));
      assert.deepEqual(withoutCached(got), withoutCached(want));
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
