// `deepinfer serve --data-parallel-size 2 --expert-parallel` on the default model (a DeepSeek-V3
// family MoE): rank 0's front sends requests to both ranks (one through the relay to rank 1's
// HTTP server), the ranks run their MoE layers together, and in batch-invariant mode every answer,
// streamed or not, with logprobs, equals the one-rank server's: the official openai client against
// both. /metrics shows the routing; SIGTERM stops the group cleanly; a rank that loses its device
// ends the group: the client gets an error, not a hang, and the server exits.
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
