// The official clients against `deepinfer serve`: openai (Chat Completions, Completions,
// Responses) and @anthropic-ai/sdk (Messages), streaming and not, tools and tool results,
// reasoning on and off, stop, n, logprobs, seeds and usage. The SDKs' own stream accumulators
// check the event sequences; token counts are checked against the server's /tokenize.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { MODEL, startServer } from './harness.mjs';

let server;
let openai;
let anthropic;
before(async () => {
  server = await startServer();
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
});
after(async () => { await server.stop(); });

const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Name a colour.' }];
const weatherTool = {
  type: 'function',
  function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
};
const toolHistory = [
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
  { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 21}' },
];

async function tokenCount(body) {
  const res = await fetch(`${server.url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  assert.equal(res.status, 200);
  return (await res.json()).count;
}

describe('openai chat completions', () => {
  test('non-streaming: text, finish_reason and exact usage', async () => {
    const r = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 0 });
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.model, MODEL);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 8);
    assert.equal(r.usage.prompt_tokens, await tokenCount({ messages }));
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 8);
  });

  test('streaming gives the same text as non-streaming, then a usage chunk', async () => {
    const whole = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 0 });
    const stream = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      for (const choice of chunk.choices) {
        text += choice.delta.content ?? '';
        finish = choice.finish_reason ?? finish;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(text, whole.choices[0].message.content);
    assert.equal(finish, 'length');
    assert.equal(usage.completion_tokens, 8);
    assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
  });

  test('the same seed gives the same text; another seed another', async () => {
    const run = (seed) => openai.chat.completions.create({ model: MODEL, messages, max_tokens: 12, temperature: 1, seed });
    const [a, b, c] = await Promise.all([run(42), run(42), run(43)]);
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    assert.notEqual(a.choices[0].message.content, c.choices[0].message.content);
  });

  test('n choices', async () => {
    const r = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 6, temperature: 1, seed: 5, n: 3 });
    assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1, 2]);
    assert.equal(r.usage.completion_tokens, 18);
  });

  test('logprobs with top_logprobs', async () => {
    const r = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2 });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 5);
    for (const entry of content) {
      assert.equal(typeof entry.token, 'string');
      assert.ok(entry.logprob <= 0);
      assert.equal(entry.top_logprobs.length, 2);
      // Greedy: the chosen token is the most likely one, and the list is in order.
      assert.equal(entry.token, entry.top_logprobs[0].token);
      assert.equal(entry.logprob, entry.top_logprobs[0].logprob);
      assert.ok(entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob);
    }
  });

  test('a stop string ends the text before it', async () => {
    // Seeded sampling: varied text, and the same tokens again up to the stop string.
    const sampled = { model: MODEL, messages, max_tokens: 16, temperature: 1, seed: 3 };
    const text = (await openai.chat.completions.create(sampled)).choices[0].message.content;
    assert.ok(text.length >= 8, `text too short to cut: ${JSON.stringify(text)}`);
    const stop = text.slice(4, 7);
    const r = await openai.chat.completions.create({ ...sampled, stop: [stop] });
    assert.equal(r.choices[0].message.content, text.slice(0, text.indexOf(stop)));
    assert.equal(r.choices[0].finish_reason, 'stop');
  });

  test('tools and tool results are rendered into the prompt', async () => {
    const r = await openai.chat.completions.create({ model: MODEL, messages: toolHistory, tools: [weatherTool], max_tokens: 4, temperature: 0 });
    assert.equal(r.usage.prompt_tokens, await tokenCount({ messages: toolHistory, tools: [weatherTool] }));
    assert.ok(r.usage.prompt_tokens > await tokenCount({ messages: [toolHistory[0]] }));
    assert.ok(['length', 'stop', 'tool_calls'].includes(r.choices[0].finish_reason));
  });

  test('reasoning on and off: prompts differ and forced <think> output is reasoning', async () => {
    const off = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 2, temperature: 0, chat_template_kwargs: { enable_thinking: false } });
    const on = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 2, temperature: 0 });
    assert.equal(off.usage.prompt_tokens, await tokenCount({ messages, chat_template_kwargs: { enable_thinking: false } }));
    assert.notEqual(off.usage.prompt_tokens, on.usage.prompt_tokens);
    // Bias the model into "<think>" (id 151667) at every step: the first opens the reasoning
    // block, the other three are its text, and no visible content is left.
    const think = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 4, temperature: 0, logit_bias: { 151667: 100 } });
    assert.equal(think.choices[0].message.reasoning_content, '<think>'.repeat(3));
    assert.equal(think.choices[0].message.content, '');
  });
});

describe('openai completions', () => {
  test('text prompt with echo and logprobs', async () => {
    const r = await openai.completions.create({ model: MODEL, prompt: 'The capital of France is', max_tokens: 5, temperature: 0, echo: true, logprobs: 1 });
    assert.equal(r.object, 'text_completion');
    assert.ok(r.choices[0].text.startsWith('The capital of France is'));
    assert.equal(r.usage.completion_tokens, 5);
    assert.ok(Array.isArray(r.choices[0].logprobs.tokens));
  });

  test('token-id prompt, streaming equals non-streaming', async () => {
    const prompt = [9707, 11, 1879, 0];
    const whole = await openai.completions.create({ model: MODEL, prompt, max_tokens: 6, temperature: 0 });
    assert.equal(whole.usage.prompt_tokens, 4);
    const stream = await openai.completions.create({ model: MODEL, prompt, max_tokens: 6, temperature: 0, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    assert.equal(text, whole.choices[0].text);
  });
});

describe('openai responses', () => {
  test('non-streaming and streaming agree; usage is exact', async () => {
    const r = await openai.responses.create({ model: MODEL, input: 'Say hi.', max_output_tokens: 6, temperature: 0 });
    assert.equal(r.object, 'response');
    assert.equal(typeof r.output_text, 'string');
    assert.equal(r.usage.output_tokens, 6);
    assert.equal(r.usage.input_tokens, await tokenCount({ messages: [{ role: 'user', content: 'Say hi.' }] }));
    const stream = await openai.responses.create({ model: MODEL, input: 'Say hi.', max_output_tokens: 6, temperature: 0, stream: true });
    const events = [];
    for await (const event of stream) events.push(event);
    assert.equal(events[0].type, 'response.created');
    assert.ok(['response.completed', 'response.incomplete'].includes(events.at(-1).type));
    events.forEach((e, i) => assert.equal(e.sequence_number, i));
    const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
    assert.equal(text, r.output_text);
  });

  test('function tools and function_call_output items', async () => {
    const input = [
      { role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: '{"temp_c": 21}' },
    ];
    const tools = [{ type: 'function', name: 'get_weather', description: 'Weather of a city', parameters: weatherTool.function.parameters }];
    const r = await openai.responses.create({ model: MODEL, input, tools, max_output_tokens: 4, temperature: 0 });
    assert.equal(r.usage.input_tokens, await tokenCount({ messages: toolHistory, tools: [weatherTool] }));
  });
});

describe('anthropic messages', () => {
  const params = { model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'Hello there' }], temperature: 0 };
  const textOf = (message) => message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

  test('non-streaming: text block, stop_reason and usage', async () => {
    const m = await anthropic.messages.create(params);
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.equal(m.content[0].type, 'text');
    assert.ok(m.content[0].text.length > 0);
    assert.equal(m.stop_reason, 'max_tokens');
    assert.equal(m.usage.output_tokens, 16);
    assert.equal(m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0), await tokenCount({ messages: params.messages }));
  });

  test('the SDK stream accumulates to the non-streaming message', async () => {
    const whole = await anthropic.messages.create(params);
    const stream = anthropic.messages.stream(params);
    const final = await stream.finalMessage();
    assert.deepEqual(final.content, whole.content);
    assert.equal(final.stop_reason, 'max_tokens');
    assert.equal(final.usage.output_tokens, 16);
  });

  test('a stop sequence gives stop_reason stop_sequence', async () => {
    const text = textOf(await anthropic.messages.create(params));
    assert.ok(text.length >= 4, `text too short to cut: ${JSON.stringify(text)}`);
    const stop = text.slice(1, 4);
    const m = await anthropic.messages.create({ ...params, stop_sequences: [stop] });
    assert.equal(m.stop_reason, 'stop_sequence');
    assert.equal(m.stop_sequence, stop);
    assert.equal(textOf(m), text.slice(0, text.indexOf(stop)));
  });

  test('tools, tool_use and tool_result blocks; thinking enabled', async () => {
    const tools = [{ name: 'get_weather', description: 'Weather of a city', input_schema: weatherTool.function.parameters }];
    const history = [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '{"temp_c": 21}' }] },
    ];
    const m = await anthropic.messages.create({ model: MODEL, max_tokens: 4, tools, messages: history });
    assert.ok(m.usage.input_tokens > 0);
    const thinking = anthropic.messages.stream({ model: MODEL, max_tokens: 4, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: [{ role: 'user', content: 'hi' }] });
    const final = await thinking.finalMessage();
    assert.equal(final.usage.output_tokens, 4);
  });
});
