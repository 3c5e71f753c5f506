// Image parts through every API with the official clients against `deepinfer serve` on the default
// model (text only): a good image is decoded and then refused naming the part, a bad one (truncated,
// mismatched type, an http URL) is a 400 naming the part and the problem, and the server keeps
// answering normal requests afterwards. Then on a multimodal Gemma 3 (the gemma3_vision fixture, a
// tiny Gemma3ForConditionalGeneration from transformers, with its test tokenizer): the same image
// through every API gives one prompt (the count Hugging Face tokenizers give for the expanded
// Gemma 3 prompt) and one greedy answer, and a repeat hits the prefix cache through the image;
// through `deepinfer router` and a registered worker, which preprocesses the relayed image file,
// the same answer. Then on a Qwen2.5-VL (the qwen2_5_vl fixture, whose images take as many tokens
// as their resized size has merged patches, at M-RoPE positions) and a Qwen3-VL (qwen3_vl: its own
// template, 16-pixel patches, DeepStack): the same through every API.
// Then an image encoder of its own (serve --role encoder) behind the router: the worker takes its
// rows and gives the single server's answer and logprobs; with the encoder killed, the worker
// encodes the files itself; a worker whose body limit the rows would pass gets the file instead.
// Then across a prefill/decode split: the prefill worker runs the image and the decode worker
// continues at its M-RoPE positions, with and without the encoder. Last, with --allow-image-urls,
// the server fetches http image URLs (from a local HTTP server here): the same answer as the image
// sent inline, redirects followed, and each failure a 400 naming the part, the URL and the problem.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import zlib from 'node:zlib';
import { after, before, describe, test } from 'node:test';
import { createRequire } from 'node:module';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { startRedis } from './cluster_harness.mjs';
import { MODEL, metrics, startCommand, startServer } from './harness.mjs';

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

// An image encoder service (serve --role encoder, which takes no engine flags) on a fixture.
const startEncoder = (fixture, args) => startCommand(['serve', '--model', fixture, '--port', '0', '--served-model-name',
                                                      MODEL, '--role', 'encoder', '--threads', '1', ...args]);

// A server on a multimodal fixture with its two clients, started before the suite's tests.
function visionServer(fixture, args = []) {
  const server = { fixture };
  before(async () => {
    server.process = await startServer(args, fixture);
    server.url = server.process.url;
    server.openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    server.anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => { await server.process.stop(); });
  return server;
}

// The token count Hugging Face tokenizers give prompt over the fixture's tokenizer.
async function countTokens(fixture, prompt) {
  const { Tokenizer } = createRequire(new URL('../package.json', import.meta.url))('@anush008/tokenizers');
  const tokenizer = Tokenizer.fromFile(`${fixture}/tokenizer.json`);
  return (await tokenizer.encode(prompt, null, { addSpecialTokens: false })).getIds().length;
}

// "What is this?" and the PNG through Chat, Responses and Messages: each prompt promptTokens long
// (Anthropic counts the cached part apart), one greedy answer; returns the chat completion.
async function sameAnswerThroughEveryApi(server, promptTokens) {
  const url = `data:image/png;base64,${pngBase64}`;
  const chat = await server.openai.chat.completions.create({
    model: MODEL, max_tokens: 6, temperature: 0, messages: [
      { role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image_url', image_url: { url } }] }],
  });
  assert.equal(chat.usage.prompt_tokens, promptTokens);
  const response = await server.openai.responses.create({
    model: MODEL, max_output_tokens: 6, temperature: 0,
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'What is this?' },
                                       { type: 'input_image', image_url: url, detail: 'auto' }] }],
  });
  assert.equal(response.usage.input_tokens, promptTokens);
  assert.equal(response.output_text, chat.choices[0].message.content);
  const message = await server.anthropic.messages.create({
    model: MODEL, max_tokens: 6, temperature: 0,
    messages: [{ role: 'user', content: [{ type: 'text', text: 'What is this?' },
                                         { type: 'image', source: { type: 'base64', media_type: 'image/png',
                                                                    data: pngBase64 } }] }],
  });
  assert.equal(message.usage.input_tokens + message.usage.cache_read_input_tokens, promptTokens);
  assert.equal(message.content[0].text, chat.choices[0].message.content);
  return chat;
}

describe('images on a multimodal Gemma 3', () => {
  const fixture = new URL('../../data/gemma3_vision', import.meta.url).pathname;
  const vision = visionServer(fixture);

  test('every API places the image and answers the same', async () => {
    // Gemma 3's template and Gemma3Processor's expansion (4 image tokens in this fixture).
    const promptTokens = await countTokens(fixture, '<bos><start_of_turn>user\nWhat is this?\n\n<start_of_image>' +
      '<image_soft_token>'.repeat(4) + '<end_of_image>\n\n<end_of_turn>\n<start_of_turn>model\n');
    const chat = await sameAnswerThroughEveryApi(vision, promptTokens);
    assert.equal(chat.usage.completion_tokens, 6);
    // The repeats found the prompt's blocks up to the one holding its last token (16-token blocks).
    const url = `data:image/png;base64,${pngBase64}`;
    const again = await vision.openai.chat.completions.create({
      model: MODEL, max_tokens: 6, temperature: 0, messages: [
        { role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image_url', image_url: { url } }] }],
    });
    assert.equal(again.usage.prompt_tokens_details?.cached_tokens, Math.floor((promptTokens - 1) / 16) * 16);
    assert.equal(again.choices[0].message.content, chat.choices[0].message.content);
    await rejects400(vision.openai.chat.completions.create({
      model: MODEL, max_tokens: 2, messages: [
        { role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${truncatedBase64}` } }] }],
    }), `messages[0].content[0]: ${truncated}`);
  });

  test('through a router, whose worker preprocesses the relayed image, the answer is the same', async () => {
    const redis = await startRedis();
    const router = await startCommand(['router', '--redis', redis.url, '--model', fixture, '--port', '0',
                                       '--served-model-name', MODEL, '--registry-poll-ms', '100']);
    const worker = await startServer(['--register', redis.url], fixture);
    try {
      const request = {
        model: MODEL, max_tokens: 6, temperature: 0, messages: [
          { role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${pngBase64}` } },
                                    { type: 'text', text: 'Describe it.' }] }],
      };
      const direct = await vision.openai.chat.completions.create(request);
      const client = new OpenAI({ baseURL: `${router.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      let routed;
      for (const deadline = Date.now() + 15000; !routed; await new Promise((r) => setTimeout(r, 100))) {
        try {
          routed = await client.chat.completions.create(request);
        } catch (error) {
          if (error.status !== 503 || Date.now() > deadline) throw error;  // until the worker is listed
        }
      }
      assert.equal(routed.choices[0].message.content, direct.choices[0].message.content);
      assert.equal(routed.usage.prompt_tokens, direct.usage.prompt_tokens);
      await rejects400(client.chat.completions.create({ ...request, messages: [
        { role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${truncatedBase64}` } }] }],
      }), `messages[0].content[0]: ${truncated}`);
    } finally {
      await worker.stop();
      await router.stop();
      redis.child.kill('SIGKILL');
    }
  });
});

describe('images on a Qwen2.5-VL', () => {
  const fixture = new URL('../../data/qwen2_5_vl', import.meta.url).pathname;
  const vision = visionServer(fixture);

  test('every API places the image and answers the same', async () => {
    // The Qwen2-VL template and Qwen2VLProcessor's expansion: the 37 x 53 PNG resized to 56 x 84,
    // 4 x 6 patches merged into 6 tokens.
    const promptTokens = await countTokens(fixture, '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' +
      '<|im_start|>user\nWhat is this?<|vision_start|>' + '<|image_pad|>'.repeat(6) +
      '<|vision_end|><|im_end|>\n<|im_start|>assistant\n');
    await sameAnswerThroughEveryApi(vision, promptTokens);
    // /tokenize decodes no images, and a Qwen image's token count depends on its size.
    const url = `data:image/png;base64,${pngBase64}`;
    const tokenized = await fetch(`${vision.url}/tokenize`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }] }] }),
    });
    assert.equal(tokenized.status, 400);
    assert.ok((await tokenized.text()).includes("this model's images take as many tokens as their size gives"));
    await rejects400(vision.openai.chat.completions.create({
      model: MODEL, max_tokens: 2, messages: [
        { role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${truncatedBase64}` } }] }],
    }), `messages[0].content[0]: ${truncated}`);
  });
});

describe('images on a Qwen3-VL', () => {
  const fixture = new URL('../../data/qwen3_vl', import.meta.url).pathname;
  const vision = visionServer(fixture);

  test('every API places the image and answers the same', async () => {
    // The Qwen3-VL template (no default system turn) and its processor's expansion: the 37 x 53 PNG
    // resized to 64 x 96 (16-pixel patches merged 2 x 2), 4 x 6 patches merged into 6 tokens.
    const promptTokens = await countTokens(fixture, '<|im_start|>user\nWhat is this?<|vision_start|>' +
      '<|image_pad|>'.repeat(6) + '<|vision_end|><|im_end|>\n<|im_start|>assistant\n');
    await sameAnswerThroughEveryApi(vision, promptTokens);
  });
});

describe('the image encoder as a service of its own (serve --role encoder)', () => {
  const fixture = new URL('../../data/qwen2_5_vl', import.meta.url).pathname;
  const vision = visionServer(fixture);

  test('a router sends the images to the encoder and the worker its rows: the same answer, bit for bit', async () => {
    const redis = await startRedis();
    const router = await startCommand(['router', '--redis', redis.url, '--model', fixture, '--port', '0',
                                       '--served-model-name', MODEL, '--registry-poll-ms', '100']);
    const encoder = await startEncoder(fixture, ['--register', redis.url, '--max-body-bytes', '100',
                                                 '--max-internal-body-bytes', '100000']);
    const worker = await startServer(['--register', redis.url], fixture);
    try {
      // The internal routes have a body limit of their own (an encoder's answer, the rows, is not bounded).
      const big = await fetch(`${encoder.url}/internal/v1/encode`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ images: [{ file: 'A'.repeat(100004) }] }) });
      assert.equal(big.status, 413);
      assert.ok((await big.text()).includes('over the limit of 100000 bytes (--max-internal-body-bytes)'));
      // The encoder serves only its own route, /health and /metrics.
      assert.equal((await fetch(`${encoder.url}/health`)).status, 200);
      const chat = await fetch(`${encoder.url}/v1/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL }) });
      assert.equal(chat.status, 404);
      assert.ok((await chat.text()).includes('this server is an image encoder (serve --role encoder)'));
      const bad = await fetch(`${encoder.url}/internal/v1/encode`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ images: [{ file: truncatedBase64 }] }) });
      assert.equal(bad.status, 400);
      assert.ok((await bad.text()).includes(`images[0]: ${truncated}`));
      for (const deadline = Date.now() + 15000; ; await new Promise((r) => setTimeout(r, 100))) {
        const m = await metrics(router.url);
        if (m['deepinfer_router_encoders{state="live"}'] === 1 && m['deepinfer_router_workers{state="live"}'] === 1) break;
        assert.ok(Date.now() < deadline, 'the router did not list the encoder and the worker');
      }
      const request = {
        model: MODEL, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2, messages: [
          { role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${pngBase64}` } },
                                    { type: 'text', text: 'Describe it.' }] }],
      };
      const direct = await vision.openai.chat.completions.create(request);
      const client = new OpenAI({ baseURL: `${router.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      const routed = await client.chat.completions.create(request);
      assert.equal(routed.choices[0].message.content, direct.choices[0].message.content);
      assert.deepEqual(routed.choices[0].logprobs, direct.choices[0].logprobs);
      assert.equal(routed.usage.prompt_tokens, direct.usage.prompt_tokens);
      assert.equal((await metrics(encoder.url)).deepinfer_images_encoded_total, 1);
      assert.equal((await metrics(worker.url)).deepinfer_images_encoded_total, 0);
      // The encoder is killed (its key outlives it for up to 3 s): the router cannot reach it and the
      // worker encodes the files itself, with the same answer.
      encoder.child.kill('SIGKILL');
      const fallback = await client.chat.completions.create({ ...request, messages: [
        { role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${pngBase64}` } },
                                  { type: 'text', text: 'Describe it again.' }] }] });
      const again = await vision.openai.chat.completions.create({ ...request, messages: [
        { role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${pngBase64}` } },
                                  { type: 'text', text: 'Describe it again.' }] }] });
      assert.equal(fallback.choices[0].message.content, again.choices[0].message.content);
      const m = await metrics(router.url);
      assert.equal(m.deepinfer_router_image_fallbacks_total, 1);
      assert.equal(m['deepinfer_encoder_failures_total{worker="' + new URL(encoder.url).host + '"}'], 1);
    } finally {
      await worker.stop();
      await router.stop();
      redis.child.kill('SIGKILL');
    }
  });
});

// A PNG of one colour (a few hundred bytes whatever its size): its file is much smaller than the
// encoder's rows for it.
function solidPng(width, height) {
  const chunk = (type, data) => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(data.length);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(zlib.crc32(Buffer.concat([Buffer.from(type), data])));
    return Buffer.concat([length, Buffer.from(type), data, crc]);
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header.set([8, 2, 0, 0, 0], 8);  // 8-bit RGB
  const row = Buffer.concat([Buffer.from([0]), Buffer.alloc(3 * width, 0x5a)]);
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', header),
                        chunk('IDAT', zlib.deflateSync(Buffer.concat(Array(height).fill(row)))), chunk('IEND', Buffer.alloc(0))]);
}

describe('a worker whose body limit the rows pass', () => {
  const fixture = new URL('../../data/qwen2_5_vl', import.meta.url).pathname;
  const vision = visionServer(fixture);

  test('gets the image file instead, and encodes it itself', async () => {
    const redis = await startRedis();
    const router = await startCommand(['router', '--redis', redis.url, '--model', fixture, '--port', '0',
                                       '--served-model-name', MODEL, '--registry-poll-ms', '100']);
    const encoder = await startEncoder(fixture, ['--register', redis.url]);
    // Room for the request with the small file, not with the encoder's rows (6 tokens x 64 floats).
    const worker = await startServer(['--register', redis.url, '--max-internal-body-bytes', '1500'], fixture);
    try {
      for (const deadline = Date.now() + 15000; ; await new Promise((r) => setTimeout(r, 100))) {
        const m = await metrics(router.url);
        if (m['deepinfer_router_encoders{state="live"}'] === 1 && m['deepinfer_router_workers{state="live"}'] === 1) break;
        assert.ok(Date.now() < deadline, 'the router did not list the encoder and the worker');
      }
      const request = {
        model: MODEL, max_tokens: 4, temperature: 0, messages: [
          { role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${solidPng(84, 56).toString('base64')}` } }] }],
      };
      const direct = await vision.openai.chat.completions.create(request);
      const client = new OpenAI({ baseURL: `${router.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      const routed = await client.chat.completions.create(request);
      assert.equal(routed.choices[0].message.content, direct.choices[0].message.content);
      assert.equal((await metrics(encoder.url)).deepinfer_images_encoded_total, 1);
      assert.equal((await metrics(worker.url)).deepinfer_images_encoded_total, 1);
      assert.equal((await metrics(router.url)).deepinfer_router_image_fallbacks_total, 1);
    } finally {
      await worker.stop();
      await encoder.stop();
      await router.stop();
      redis.child.kill('SIGKILL');
    }
  });
});

describe('images across a prefill/decode split', () => {
  const fixture = new URL('../../data/qwen2_5_vl', import.meta.url).pathname;
  const vision = visionServer(fixture, ['--batch-invariant']);

  test('the prefill worker runs the image, the decode worker continues at its M-RoPE positions', async () => {
    const redis = await startRedis();
    const role = (name) => ['--batch-invariant', '--register', redis.url, '--role', name];
    const router = await startCommand(['router', '--redis', redis.url, '--model', fixture, '--port', '0',
                                       '--served-model-name', MODEL, '--registry-poll-ms', '100']);
    const prefill = await startServer(role('prefill'), fixture);
    const decode = await startServer(role('decode'), fixture);
    let encoder;
    try {
      const client = new OpenAI({ baseURL: `${router.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      const ask = (text) => ({
        model: MODEL, max_tokens: 8, temperature: 0, logprobs: true, messages: [
          { role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${pngBase64}` } },
                                    { type: 'text', text }] }],
      });
      const listed = async (encoders) => {
        for (const deadline = Date.now() + 15000; ; await new Promise((r) => setTimeout(r, 100))) {
          const m = await metrics(router.url);
          if (m['deepinfer_router_workers{state="live"}'] === 2 &&
              (m['deepinfer_router_encoders{state="live"}'] ?? 0) === encoders) return;
          assert.ok(Date.now() < deadline, 'the router did not list the workers');
        }
      };
      await listed(0);
      // The image's files go to both: the prefill worker encodes it, the decode worker only names it.
      const direct = await vision.openai.chat.completions.create(ask('Describe it.'));
      const split = await client.chat.completions.create(ask('Describe it.'));
      assert.equal(split.choices[0].message.content, direct.choices[0].message.content);
      assert.deepEqual(split.choices[0].logprobs, direct.choices[0].logprobs);
      assert.equal(split.usage.prompt_tokens, direct.usage.prompt_tokens);
      assert.equal((await metrics(prefill.url)).deepinfer_images_encoded_total, 1);
      assert.equal((await metrics(decode.url)).deepinfer_images_encoded_total, 0);
      // With an image encoder, both take its rows.
      encoder = await startEncoder(fixture, ['--register', redis.url]);
      await listed(1);
      const other = await vision.openai.chat.completions.create(ask('And now?'));
      const encoded = await client.chat.completions.create(ask('And now?'));
      assert.equal(encoded.choices[0].message.content, other.choices[0].message.content);
      assert.deepEqual(encoded.choices[0].logprobs, other.choices[0].logprobs);
      assert.equal((await metrics(encoder.url)).deepinfer_images_encoded_total, 1);
      assert.equal((await metrics(prefill.url)).deepinfer_images_encoded_total, 1);
      assert.equal((await metrics(decode.url)).deepinfer_images_encoded_total, 0);
    } finally {
      if (encoder) await encoder.stop();
      await decode.stop();
      await prefill.stop();
      await router.stop();
      redis.child.kill('SIGKILL');
    }
  });
});

describe('image URLs fetched with --allow-image-urls', () => {
  const fixture = new URL('../../data/gemma3_vision', import.meta.url).pathname;
  const maxBodyBytes = 2 * png.length;
  const vision = visionServer(fixture, ['--allow-image-urls', '--max-body-bytes', String(maxBodyBytes)]);
  let files;
  let filesUrl;
  before(async () => {
    files = createServer((request, response) => {
      if (request.url === '/image.png') {
        response.writeHead(200, { 'content-type': 'image/png' });
        response.end(png);
      } else if (request.url === '/moved') {
        response.writeHead(302, { location: '/image.png' });
        response.end();
      } else if (request.url === '/loop') {
        response.writeHead(302, { location: '/loop' });
        response.end();
      } else if (request.url === '/mislabeled') {
        response.writeHead(200, { 'content-type': 'image/jpeg' });  // the magic bytes decide
        response.end(png);
      } else if (request.url === '/page') {
        response.writeHead(200, { 'content-type': 'text/html' });
        response.end('hello, world');
      } else if (request.url === '/big') {
        response.writeHead(200, { 'content-type': 'image/png' });
        response.end(Buffer.concat([png, png, png]));
      } else {
        response.writeHead(404);
        response.end();
      }
    });
    await new Promise((resolve) => files.listen(0, '127.0.0.1', resolve));
    filesUrl = `http://127.0.0.1:${files.address().port}`;
  });
  after(() => { files.close(); });

  const ask = (url) => vision.openai.chat.completions.create({
    model: MODEL, max_tokens: 6, temperature: 0, messages: [
      { role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image_url', image_url: { url } }] }],
  });

  test('a fetched image answers as the same image inline', async () => {
    const inline = await ask(`data:image/png;base64,${pngBase64}`);
    for (const path of ['/image.png', '/moved', '/mislabeled']) {
      const fetched = await ask(`${filesUrl}${path}`);
      assert.equal(fetched.choices[0].message.content, inline.choices[0].message.content, path);
      assert.equal(fetched.usage.prompt_tokens, inline.usage.prompt_tokens, path);
    }
    const message = await vision.anthropic.messages.create({
      model: MODEL, max_tokens: 6, temperature: 0,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'What is this?' },
                                           { type: 'image', source: { type: 'url', url: `${filesUrl}/image.png` } }] }],
    });
    assert.equal(message.content[0].text, inline.choices[0].message.content);
  });

  test('a URL that cannot be fetched is a 400 naming the part, the URL and why', async () => {
    const part = 'messages[0].content[1]';
    await rejects400(ask(`${filesUrl}/missing`), `${part}: fetching ${filesUrl}/missing: HTTP 404 Not Found`);
    await rejects400(ask(`${filesUrl}/big`), `${part}: fetching ${filesUrl}/big: the request with its images is over ` +
                     `${maxBodyBytes} bytes, the files as base64 (--max-body-bytes)`);
    await rejects400(ask(`${filesUrl}/loop`), `${part}: fetching ${filesUrl}/loop: more than 3 redirects`);
    // A URL may not write its own request lines.
    await rejects400(ask(`${filesUrl}/image.png HTTP/1.1\r\nX-Injected: 1`),
                     'the URL holds a space, control or non-ASCII byte (percent-encode it)');
    await rejects400(ask(`${filesUrl}/page`),
                     `${part}: image data is not a JPEG, PNG, WebP or GIF file (it begins with bytes 68 65 6c 6c`);
    const closed = createServer();
    await new Promise((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const closedUrl = `http://127.0.0.1:${closed.address().port}/image.png`;
    await new Promise((resolve) => closed.close(resolve));
    await rejects400(ask(closedUrl), `${part}: fetching ${closedUrl}: cannot connect to 127.0.0.1:`);
    const served = await ask(`${filesUrl}/image.png`);
    assert.equal(served.choices.length, 1);
  });
});
