// `deepinfer serve --data-parallel-size 2 --expert-parallel` on the default model (a DeepSeek-V3
// family MoE): rank 0's front sends requests to both ranks (one through the relay to rank 1's
// HTTP server), the ranks run their MoE layers together, and in batch-invariant mode every answer,
// streamed or not, with logprobs, equals the one-rank server's: the official openai client against
// both. /metrics shows the routing; SIGTERM stops the group cleanly; a rank that loses its device
// ends the group: the client gets an error, not a hang, and the server exits. Without expert
// parallelism, prefix-affinity routing keeps prompts that share a prefix on the rank that caches it.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { MODEL, metrics, startServer } from './harness.mjs';

const model = process.env.DEEPINFER_DEFAULT_MODEL;
let one;
let group;
before(async () => {
  one = await startServer(['--batch-invariant'], model);
  group = await startServer(['--batch-invariant', '--data-parallel-size', '2', '--expert-parallel'], model);
});
after(async () => {
  await one.stop();
  await group.stop();
});

const client = (server) => new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
const prompts = ['def fibonacci(n):', 'import os', 'class Stack:', 'for i in range(10):', '# sort a list',
                 'x = [1, 2, 3]'];

async function completions(server) {
  const openai = client(server);
  return Promise.all(prompts.map((prompt, i) => openai.completions.create({
    model: MODEL, prompt, max_tokens: 8, temperature: i % 2 === 0 ? 0 : 0.9, seed: i, logprobs: 2 })));
}

describe('data-parallel serving with expert parallelism', () => {
  test('concurrent requests over both ranks answer as one rank does', async () => {
    const want = await completions(one);
    const got = await completions(group);
    for (let i = 0; i < prompts.length; ++i) {
      assert.equal(got[i].choices[0].text, want[i].choices[0].text, prompts[i]);
      assert.deepEqual(got[i].choices[0].logprobs.token_logprobs, want[i].choices[0].logprobs.token_logprobs);
    }
    const m = await metrics(group.url);
    assert.ok(m['deepinfer_rank_routed_requests_total{rank="0"}'] >= 1, JSON.stringify(m));
    assert.ok(m['deepinfer_rank_routed_requests_total{rank="1"}'] >= 1, JSON.stringify(m));
    assert.equal(m['deepinfer_rank_outstanding_requests{rank="1"}'], 0);
  });

  test('streams through the relay arrive whole', async () => {
    // Two at once, so the second goes to the rank the first does not hold.
    const run = async (server) => {
      const openai = client(server);
      return Promise.all([0, 1].map(async (i) => {
        const stream = await openai.chat.completions.create({
          model: MODEL, messages: [{ role: 'user', content: `Write a function number ${i}` }], max_tokens: 10,
          temperature: 0, stream: true });
        let text = '';
        let finish = null;
        for await (const chunk of stream) {
          text += chunk.choices[0]?.delta?.content ?? '';
          finish = chunk.choices[0]?.finish_reason ?? finish;
        }
        return { text, finish };
      }));
    };
    assert.deepEqual(await run(group), await run(one));
  });

  test('a rank that fails ends the group with an error to the client', async () => {
    // Every rank's third expert product loses the device (the failure-injection hook).
    const failing = await startServer(['--data-parallel-size', '2', '--expert-parallel'], model,
                                      { DEEPINFER_FAULT: 'device_lost:moe_experts:3' });
    const exited = once(failing.child, 'exit');
    await assert.rejects(
      client(failing).completions.create({ model: MODEL, prompt: 'def f(x):', max_tokens: 16, temperature: 0 }),
      (error) => error.status >= 500 || error.name === 'APIConnectionError');
    const [code, signal] = await Promise.race([
      exited, new Promise((_, reject) => setTimeout(() => reject(new Error('the group did not exit')), 20000))]);
    assert.ok(code !== null || signal !== null);
  });
});

// Two data-parallel ranks without expert parallelism: each its own engine and prefix cache. Prompts
// sharing a long prefix, one after another: the least-loaded front lets idle ranks take turns, so
// every other prompt lands where its prefix is not cached; prefix affinity keeps them on the rank
// that has it. The oracle is the engines' own count of prompt tokens served from their caches.
describe('data-parallel routing and the prefix cache', () => {
  const shared = 'You are a careful assistant. Answer in one short sentence, plain words, no lists. '.repeat(3);
  const cachedTokens = async (server, question) => {
    const r = await client(server).chat.completions.create({
      model: MODEL, messages: [{ role: 'system', content: shared }, { role: 'user', content: question }],
      max_tokens: 2, temperature: 0 });
    return r.usage.prompt_tokens_details?.cached_tokens ?? 0;
  };
  const questions = ['What is a stack?', 'What is a queue?', 'What is a heap?', 'What is a tree?'];

  for (const [routing, cachedAfterFirst] of [['least-loaded', false], ['prefix-affinity', true]]) {
    test(`${routing}: ${cachedAfterFirst ? 'every' : 'every other'} later prompt hits the cache`, async () => {
      const server = await startServer(['--data-parallel-size', '2', '--data-parallel-routing', routing], model);
      try {
        const cached = [];
        for (const question of questions) cached.push(await cachedTokens(server, question));
        assert.equal(cached[0], 0);
        if (cachedAfterFirst) {
          for (const c of cached.slice(1)) assert.ok(c >= 16, JSON.stringify(cached));
        } else {
          // Rank 0, rank 1, rank 0, rank 1: the second prompt finds rank 1 cold, the third finds rank 0 warm.
          assert.equal(cached[1], 0, JSON.stringify(cached));
          assert.ok(cached[2] >= 16 && cached[3] >= 16, JSON.stringify(cached));
        }
        const m = await metrics(server.url);
        const byAffinity = m['deepinfer_rank_routed_by_prefix_affinity_total{rank="0"}'] +
                           m['deepinfer_rank_routed_by_prefix_affinity_total{rank="1"}'];
        assert.equal(byAffinity, cachedAfterFirst ? questions.length - 1 : 0, JSON.stringify(m));
      } finally {
        await server.stop();
      }
    });
  }

  test('a bad routing name is refused before any rank starts', async () => {
    await assert.rejects(startServer(['--data-parallel-size', '2', '--data-parallel-routing', 'random'], model),
                         /--data-parallel-routing must be least-loaded or prefix-affinity, got 'random'/);
  });
});
