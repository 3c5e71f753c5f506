// Structured output failures through the official openai client: a schema the engine cannot
// enforce is a 400 naming the keyword, streamed or not (never an empty 200); a pattern that makes
// backtracking regex engines explode is answered at once and stalls nobody else.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { MODEL, startServer, waitIdle } from './harness.mjs';

let server;
let openai;
before(async () => {
  server = await startServer();
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 20000 });
});
after(async () => { await server.stop(); });

const messages = [{ role: 'user', content: 'Describe the project as JSON.' }];
// A JSON Schema Store schema (MaskBench sample) whose arrays say uniqueItems: true.
const projectSchema = JSON.parse(readFileSync(
  new URL('../../data/jsonschema/maskbench/JsonSchemaStore---project-1.0.0-rc1.json', import.meta.url))).schema;
const uniqueItemsFormat = { type: 'json_schema', json_schema: { name: 'project', strict: true, schema: projectSchema } };

async function rejection(promise) {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  assert.fail('the request succeeded');
}

function assertUnsupportedKeyword(error) {
  assert.ok(error instanceof OpenAI.APIError, String(error));
  assert.equal(error.status, 400);
  assert.equal(error.param, 'response_format');
  assert.match(error.message, /unsupported keyword 'uniqueItems' at '#\/.*uniqueItems'/);
}

// Resolves with the promise's value, or fails once ms have passed.
function within(ms, promise, what) {
  let timer;
  const late = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms`)), ms); });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

describe('structured output errors', () => {
  test('an unsupported keyword is a 400 naming it, not an empty success', async () => {
    const error = await rejection(openai.chat.completions.create({
      model: MODEL, messages, max_tokens: 16, response_format: uniqueItemsFormat,
    }));
    assertUnsupportedKeyword(error);
  });

  test('streaming: the same 400, before any event', async () => {
    const error = await rejection((async () => {
      const stream = await openai.chat.completions.create({
        model: MODEL, messages, max_tokens: 16, response_format: uniqueItemsFormat, stream: true,
      });
      for await (const chunk of stream) assert.fail(`got a chunk: ${JSON.stringify(chunk)}`);
    })());
    assertUnsupportedKeyword(error);
    await waitIdle(server.url);
  });

  test('a catastrophic pattern is answered at once, and so is a plain request sent after it', async () => {
    const exploding = 'a'.repeat(45) + 'b';  // ^(a+)+$ backtracks 2^45 times on it
    const format = (values) => ({
      type: 'json_schema',
      json_schema: { name: 'p', strict: true, schema: { type: 'string', pattern: '^(a+)+$', enum: values } },
    });
    const none = openai.chat.completions.create({ model: MODEL, messages, max_tokens: 16, response_format: format([exploding]) });
    const plain = openai.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 4 });
    const [error, completion] = await within(20000, Promise.all([rejection(none), plain]), 'crafted + plain');
    assert.equal(error.status, 400);
    assert.match(error.message, /leaves no value that satisfies the schema/);
    assert.equal(completion.usage.completion_tokens, 4);

    const one = await within(20000, openai.chat.completions.create({
      model: MODEL, messages, max_tokens: 16, response_format: format(['aaaa', exploding]),
    }), 'crafted with a matching value');
    assert.equal(JSON.parse(one.choices[0].message.content), 'aaaa');
    await waitIdle(server.url);
  });
});
