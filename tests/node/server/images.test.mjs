// Image parts through every API with the official clients against `deepinfer serve` on the default
// model (text only): a good image is decoded and then refused naming the part, a bad one (truncated,
// mismatched type, an http URL) is a 400 naming the part and the problem, and the server keeps
// answering normal requests afterwards.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { MODEL, startServer } from './harness.mjs';

const png = readFileSync(new URL('../../data/image/rgb_37x53.png', import.meta.url));
const pngBase64 = png.toString('base64');
const truncatedBase64 = png.subarray(0, png.length >> 1).toString('base64');
const refusal = `model ${MODEL} does not accept images (it has no vision encoder)`;
const truncated = 'image data is truncated PNG (the file ends early)';
const notFetched = 'image URLs are not fetched unless the server is started with --allow-image-urls';

let server;
let openai;
let anthropic;
before(async () => {
  server = await startServer([], process.env.DEEPINFER_DEFAULT_MODEL);
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
});
after(async () => { await server.stop(); });

async function rejects400(promise, expected) {
  await assert.rejects(promise, (error) => {
    assert.equal(error.status, 400, String(error));
    assert.ok(error.message.includes(expected), `"${error.message}" lacks "${expected}"`);
    return true;
  });
}

const chatWithImage = (url) => openai.chat.completions.create({
  model: MODEL, max_tokens: 4, messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image_url', image_url: { url } }] }],
});
const responsesWithImage = (url) => openai.responses.create({
  model: MODEL, max_output_tokens: 4,
  input: [{ role: 'user', content: [{ type: 'input_image', image_url: url, detail: 'auto' }] }],
});
const messagesWithImage = (source) => anthropic.messages.create({
  model: MODEL, max_tokens: 4,
  messages: [{ role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image', source }] }],
});

async function answersNormally() {
  const chat = await openai.chat.completions.create({ model: MODEL, max_tokens: 4,
                                                      messages: [{ role: 'user', content: 'def f(x):' }] });
  assert.equal(chat.choices.length, 1);
  const response = await openai.responses.create({ model: MODEL, max_output_tokens: 4, input: 'import os' });
  assert.ok(['completed', 'incomplete'].includes(response.status), response.status);
  const message = await anthropic.messages.create({ model: MODEL, max_tokens: 4,
                                                    messages: [{ role: 'user', content: 'class A:' }] });
  assert.ok(['max_tokens', 'end_turn'].includes(message.stop_reason), message.stop_reason);
}

describe('image parts on a text-only model', () => {
  test('OpenAI Chat image_url parts', async () => {
    await rejects400(chatWithImage(`data:image/png;base64,${pngBase64}`), `messages[1].content[1]: ${refusal}`);
    await rejects400(chatWithImage(`data:image/png;base64,${truncatedBase64}`), `messages[1].content[1]: ${truncated}`);
    await rejects400(chatWithImage('https://example.com/cat.png'), `messages[1].content[1]: ${notFetched}`);
    await answersNormally();
  });

  test('OpenAI Responses input_image parts', async () => {
    await rejects400(responsesWithImage(`data:image/png;base64,${pngBase64}`), `input[0].content[0]: ${refusal}`);
    await rejects400(responsesWithImage(`data:image/webp;base64,${pngBase64}`),
                     'input[0].content[0]: image data is PNG but its declared media type is image/webp');
    await rejects400(responsesWithImage('http://example.com/cat.png'), `input[0].content[0]: ${notFetched}`);
    await answersNormally();
  });

  test('Anthropic image blocks', async () => {
    await rejects400(messagesWithImage({ type: 'base64', media_type: 'image/png', data: pngBase64 }),
                     `messages[0].content[1]: ${refusal}`);
    await rejects400(messagesWithImage({ type: 'base64', media_type: 'image/png', data: truncatedBase64 }),
                     `messages[0].content[1]: ${truncated}`);
    await rejects400(messagesWithImage({ type: 'base64', media_type: 'image/jpeg', data: pngBase64 }),
                     'messages[0].content[1]: image data is PNG but its declared media type is image/jpeg');
    await rejects400(messagesWithImage({ type: 'url', url: 'https://example.com/cat.png' }),
                     `messages[0].content[1]: ${notFetched}`);
    await answersNormally();
  });
});
