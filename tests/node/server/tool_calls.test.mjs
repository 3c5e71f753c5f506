// Constrained tool calls end to end: the official openai client against `deepinfer serve` on the
// default model (models/default, DeepSeek-V3 family, trained on Python code, never on tool calls).
// Whatever the model prefers, tool_choice "required", a named function, and "auto" with a strict
// tool must give calls of the offered tools whose arguments ajv accepts.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { MODEL, startServer } from './harness.mjs';

const Ajv = createRequire(import.meta.url)('ajv');
const ajv = new Ajv({ strict: false });

let server;
let openai;
before(async () => {
  server = await startServer([], process.env.DEEPINFER_DEFAULT_MODEL);
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => { await server.stop(); });

// Finite argument languages, so every call completes within max_tokens.
const tools = [
  { type: 'function', function: { name: 'get_weather', strict: true, parameters: {
    type: 'object', additionalProperties: false, required: ['city', 'unit', 'days'],
    properties: { city: { type: 'string', minLength: 1, maxLength: 8 }, unit: { enum: ['c', 'f'] },
                  days: { type: 'integer', minimum: 1, maximum: 14 } } } } },
  { type: 'function', function: { name: 'add_tags', parameters: {
    type: 'object', additionalProperties: false, required: ['tags', 'pin'],
    properties: { tags: { type: 'array', items: { type: 'string', pattern: '^[a-z]{1,4}$' }, minItems: 1, maxItems: 3 },
                  pin: { type: 'boolean' } } } } },
];
const validators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
const messages = [{ role: 'user', content: 'Weather in Paris for three days, and tag it.' }];
// <｜tool▁calls▁begin｜> in the default model's tokenizer.
const kCallsBegin = 6;

function checkCall(call, names) {
  assert.ok(names.includes(call.function.name), `unexpected tool ${call.function.name}`);
  const args = JSON.parse(call.function.arguments);
  const valid = validators[call.function.name];
  assert.ok(valid(args), `${call.function.arguments}: ${JSON.stringify(valid.errors)}`);
}

describe('constrained tool calls on the default model', () => {
  test('tool_choice required: one valid call per sample, streamed and not', async () => {
    const names = new Set();
    for (const seed of [1, 2, 3, 4]) {
      const r = await openai.chat.completions.create({ model: MODEL, messages, tools, tool_choice: 'required',
                                                       max_tokens: 200, temperature: 1, seed });
      const choice = r.choices[0];
      assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
      assert.equal(choice.message.tool_calls.length, 1);
      checkCall(choice.message.tool_calls[0], ['get_weather', 'add_tags']);
      names.add(choice.message.tool_calls[0].function.name);
    }
    const stream = await openai.chat.completions.create({ model: MODEL, messages, tools, tool_choice: 'required',
                                                          max_tokens: 200, temperature: 1, seed: 5, stream: true });
    let name = '';
    let args = '';
    for await (const chunk of stream) {
      for (const call of chunk.choices[0]?.delta?.tool_calls ?? []) {
        name += call.function?.name ?? '';
        args += call.function?.arguments ?? '';
      }
    }
    checkCall({ function: { name, arguments: args } }, ['get_weather', 'add_tags']);
  });

  test('a named function is the one called', async () => {
    const r = await openai.chat.completions.create({ model: MODEL, messages, tools, max_tokens: 200, temperature: 1,
                                                     seed: 7, tool_choice: { type: 'function', function: { name: 'add_tags' } } });
    assert.equal(r.choices[0].message.tool_calls.length, 1);
    checkCall(r.choices[0].message.tool_calls[0], ['add_tags']);
  });

  test('tool_choice auto with a strict tool: text, or a valid call once the model opens one', async () => {
    for (const seed of [1, 2]) {
      const r = await openai.chat.completions.create({ model: MODEL, messages, tools, max_tokens: 40, temperature: 1, seed });
      const message = r.choices[0].message;
      for (const call of message.tool_calls ?? []) checkCall(call, ['get_weather', 'add_tags']);
      assert.ok(!(message.content ?? '').includes('tool▁call'), message.content);
    }
    // Push the model to open a call block (the grammar allows the token anywhere in the text);
    // the grammar shapes the rest.
    for (const seed of [3, 4, 5]) {
      const r = await openai.chat.completions.create({ model: MODEL, messages, tools, max_tokens: 200, temperature: 1,
                                                       seed, logit_bias: { [kCallsBegin]: 100 } });
      const choice = r.choices[0];
      assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
      assert.equal(choice.message.tool_calls.length, 1);
      checkCall(choice.message.tool_calls[0], ['get_weather', 'add_tags']);
    }
  });
});
