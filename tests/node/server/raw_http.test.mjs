// Every bad input of the server's robustness list, over raw HTTP: each gets its status code and
// its API's error shape, and the server keeps serving afterwards.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { MODEL, metrics, rawExchange, startServer, waitIdle } from './harness.mjs';

const chatBody = (extra = {}) => ({ model: MODEL, messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 4, temperature: 0, ...extra });

async function post(url, path, body, headers = {}) {
  const res = await fetch(url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json };
}

function assertOpenAIError(r, status) {
  assert.equal(r.status, status, r.text);
  assert.equal(typeof r.json?.error?.message, 'string', r.text);
  assert.equal(typeof r.json.error.type, 'string', r.text);
  assert.ok('param' in r.json.error && 'code' in r.json.error, r.text);
}

function assertAnthropicError(r, status) {
  assert.equal(r.status, status, r.text);
  assert.equal(r.json?.type, 'error', r.text);
  assert.equal(typeof r.json.error?.type, 'string', r.text);
  assert.equal(typeof r.json.error.message, 'string', r.text);
}

async function assertServes(url) {
  assert.equal((await fetch(`${url}/health`)).status, 200);
  const r = await post(url, '/v1/chat/completions', chatBody());
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].finish_reason, 'length');
}

// Reads an SSE response until `frames` data frames arrived, then returns them with the reader.
async function readFrames(res, frames) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  while (text.split('\n\n').length - 1 < frames) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  return { reader, text };
}

describe('default server', () => {
  let server;
  before(async () => { server = await startServer(); });
  after(async () => { await server.stop(); });

  test('malformed JSON is a 400 naming the position', async () => {
    const r = await post(server.url, '/v1/chat/completions', '{"model": "tiny", "messages": [}');
    assertOpenAIError(r, 400);
    assert.match(r.json.error.message, /line 1, column 32/);  // the '}' (1-based)
    await assertServes(server.url);
  });

  test('a wrong type is a 400 naming the field', async () => {
    const r = await post(server.url, '/v1/chat/completions', chatBody({ temperature: 'hot' }));
    assertOpenAIError(r, 400);
    assert.match(r.json.error.message + r.json.error.param, /temperature/);
    const m = await post(server.url, '/v1/chat/completions', { model: MODEL, messages: 'hi' });
    assertOpenAIError(m, 400);
    assert.match(m.json.error.message + m.json.error.param, /messages/);
  });

  test('prompt + max_tokens over the context is a 400 with both numbers', async () => {
    const r = await post(server.url, '/v1/chat/completions', chatBody({ max_tokens: 100000 }));
    assertOpenAIError(r, 400);
    assert.match(r.json.error.message, /100000/);
    assert.match(r.json.error.message, /4096/);
  });

  test('n beyond --max-n is a 400 naming n and the limit', async () => {
    const r = await post(server.url, '/v1/chat/completions', chatBody({ n: 129 }));
    assertOpenAIError(r, 400);
    assert.equal(r.json.error.param, 'n');
    assert.match(r.json.error.message, /at most 128/);
    assert.match(r.json.error.message, /129/);
    const c = await post(server.url, '/v1/completions', { model: MODEL, prompt: 'Hi', max_tokens: 2, n: 1000 });
    assertOpenAIError(c, 400);
    assert.equal(c.json.error.param, 'n');
  });

  test('an unknown model is a 404', async () => {
    const r = await post(server.url, '/v1/chat/completions', chatBody({ model: 'gpt-7' }));
    assertOpenAIError(r, 404);
    const m = await post(server.url, '/v1/messages', { model: 'claude-9', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] });
    assertAnthropicError(m, 404);
  });

  test('out-of-vocabulary token ids are a 400', async () => {
    const r = await post(server.url, '/v1/completions', { model: MODEL, prompt: [1, 2, 999999], max_tokens: 2 });
    assertOpenAIError(r, 400);
    assert.match(r.json.error.message, /999999/);
    const d = await post(server.url, '/detokenize', { tokens: [1, -5] });
    assertOpenAIError(d, 400);
  });

  test('invalid UTF-8 in the body is a 400', async () => {
    const bytes = Buffer.concat([Buffer.from('{"model":"tiny","messages":[{"role":"user","content":"'),
                                 Buffer.from([0xff, 0xfe]), Buffer.from('"}],"max_tokens":2}')]);
    const r = await post(server.url, '/v1/chat/completions', new Uint8Array(bytes));
    assertOpenAIError(r, 400);
    assert.match(r.json.error.message, /UTF-8/);
    await assertServes(server.url);
  });

  test('unknown path is a 404, wrong method a 405', async () => {
    const r = await fetch(`${server.url}/v1/nothing`);
    assert.equal(r.status, 404);
    assert.equal(typeof (await r.json()).error.message, 'string');
    const m = await fetch(`${server.url}/v1/chat/completions`);
    assert.equal(m.status, 405);
    assert.equal(m.headers.get('allow'), 'POST');
  });

  test('Anthropic errors use the Anthropic shape', async () => {
    const r = await post(server.url, '/v1/messages', '{"model": ');
    assertAnthropicError(r, 400);
    const m = await post(server.url, '/v1/messages', { model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    assertAnthropicError(m, 400);
    assert.match(m.json.error.message, /max_tokens/);
  });

  test('a malformed HTTP request gets a 400 and the connection closes', async () => {
    const reply = await rawExchange(server.url, 'GARBAGE\r\n\r\n');
    assert.match(reply, /^HTTP\/1\.1 400/);
    await assertServes(server.url);
  });

  test('keep-alive serves several requests on one connection', async () => {
    const body = JSON.stringify(chatBody());
    const one = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    const last = one.replace('Host: x\r\n', 'Host: x\r\nConnection: close\r\n');
    const reply = await rawExchange(server.url, one + last);
    assert.equal(reply.match(/HTTP\/1\.1 200 OK/g)?.length, 2, reply);
  });

  test('a client that disconnects mid-stream frees its sequence at once', async () => {
    const before = await metrics(server.url);
    const controller = new AbortController();
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: controller.signal,
      body: JSON.stringify(chatBody({ max_tokens: 3000, ignore_eos: true, stream: true })),
    });
    assert.equal(res.status, 200);
    await readFrames(res, 3);
    controller.abort();
    const idle = await waitIdle(server.url);
    const generated = idle.deepinfer_generation_tokens_total - before.deepinfer_generation_tokens_total;
    assert.ok(generated < 3000, `generated ${generated} tokens after the client left`);
    await assertServes(server.url);
  });

  test('a non-streaming client that disconnects cancels its request', async () => {
    const before = await metrics(server.url);
    const controller = new AbortController();
    const pending = fetch(`${server.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: controller.signal,
      body: JSON.stringify({ model: MODEL, prompt: 'Once upon a time', max_tokens: 3000, ignore_eos: true }),
    }).catch(() => null);
    // Hang up once the request runs.
    while ((await metrics(server.url)).deepinfer_num_requests_running !== 1) await new Promise((r) => setTimeout(r, 20));
    controller.abort();
    await pending;
    const idle = await waitIdle(server.url);
    const generated = idle.deepinfer_generation_tokens_total - before.deepinfer_generation_tokens_total;
    assert.ok(generated < 3000, `generated ${generated} tokens after the client left`);
    const m = await metrics(server.url);
    assert.ok(m['deepinfer_requests_total{endpoint="/v1/completions",status="499"}'] >= 1);
  });
});

describe('server with an API key, a body limit and a timeout', () => {
  let server;
  before(async () => {
    server = await startServer(['--api-key', 'sekret', '--max-body-bytes', '2000', '--request-timeout', '3']);
  });
  after(async () => { await server.stop(); });

  test('a bad or missing API key is a 401; both header forms work', async () => {
    assertOpenAIError(await post(server.url, '/v1/chat/completions', chatBody()), 401);
    assertOpenAIError(await post(server.url, '/v1/chat/completions', chatBody(), { authorization: 'Bearer nope' }), 401);
    const msg = { model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] };
    assertAnthropicError(await post(server.url, '/v1/messages', msg, { 'x-api-key': 'nope' }), 401);
    assert.equal((await post(server.url, '/v1/chat/completions', chatBody(), { authorization: 'Bearer sekret' })).status, 200);
    assert.equal((await post(server.url, '/v1/messages', msg, { 'x-api-key': 'sekret' })).status, 200);
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
  });

  test('a body over the limit is a 413, checked on Content-Length before the body', async () => {
    const head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekret\r\n' +
                 'Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n';
    const reply = await rawExchange(server.url, head);  // the body never comes
    assert.match(reply, /^HTTP\/1\.1 413/);
    const big = chatBody({ messages: [{ role: 'user', content: 'x'.repeat(3000) }] });
    const r = await post(server.url, '/v1/chat/completions', big, { authorization: 'Bearer sekret' });
    assertOpenAIError(r, 413);
  });

  test('a request past the timeout gets a 408, or an error event mid-stream', async () => {
    const auth = { authorization: 'Bearer sekret' };
    const long = chatBody({ max_tokens: 3000, ignore_eos: true });
    const m = { model: MODEL, max_tokens: 3000, messages: [{ role: 'user', content: 'hi' }], stream: true };
    // The three run at once, each far longer than the 3 s limit.
    const [whole, stream, anthropicStream] = await Promise.all([
      post(server.url, '/v1/chat/completions', long, auth),
      fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json', ...auth }, body: JSON.stringify({ ...long, stream: true }),
      }).then(async (res) => ({ status: res.status, text: await res.text() })),
      fetch(`${server.url}/v1/messages`, {
        method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': 'sekret' }, body: JSON.stringify(m),
      }).then(async (res) => ({ status: res.status, text: await res.text() })),
    ]);
    assertOpenAIError(whole, 408);
    assert.equal(stream.status, 200);
    assert.match(stream.text.split('\n\n').filter(Boolean).at(-1), /"error"/);
    assert.equal(anthropicStream.status, 200);
    assert.match(anthropicStream.text.split('\n\n').filter(Boolean).at(-1), /^event: error/);
    await waitIdle(server.url);
  });
});

describe('server with a queue of one', () => {
  let server;
  before(async () => { server = await startServer(['--max-num-seqs', '1', '--max-queued-requests', '1']); });
  after(async () => { await server.stop(); });

  test('overload is a 429 (OpenAI) / 529 (Anthropic) with Retry-After', async () => {
    const controller = new AbortController();
    const running = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: controller.signal,
      body: JSON.stringify(chatBody({ max_tokens: 3000, ignore_eos: true, stream: true })),
    });
    await readFrames(running, 2);
    const queued = post(server.url, '/v1/chat/completions', chatBody());
    for (let i = 0; i < 200 && (await metrics(server.url)).deepinfer_num_requests_waiting !== 1; ++i) {
      await new Promise((r) => setTimeout(r, 20));
    }
    const chat = await post(server.url, '/v1/chat/completions', chatBody());
    assertOpenAIError(chat, 429);
    assert.equal(chat.headers.get('retry-after'), '1');
    const msg = await post(server.url, '/v1/messages', { model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });
    assertAnthropicError(msg, 529);
    assert.equal(msg.json.error.type, 'overloaded_error');
    assert.equal(msg.headers.get('retry-after'), '1');
    controller.abort();
    const done = await queued;
    assert.equal(done.status, 200, done.text);
    await waitIdle(server.url);
    await assertServes(server.url);
  });
});

describe('server with a token budget for its queue', () => {
  let server;
  before(async () => {
    server = await startServer(['--max-num-seqs', '1', '--max-queued-tokens', '2000']);
  });
  after(async () => { await server.stop(); });

  test('admission charges n x (prompt + max_tokens): 429 (OpenAI) / 529 (Anthropic) past the budget', async () => {
    const controller = new AbortController();
    const running = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: controller.signal,
      body: JSON.stringify(chatBody({ max_tokens: 3000, ignore_eos: true, stream: true })),
    });
    await readFrames(running, 2);
    // A small request waits behind it (one sequence at a time).
    const queued = post(server.url, '/v1/chat/completions', chatBody());
    for (let i = 0; i < 200 && (await metrics(server.url)).deepinfer_num_requests_waiting !== 1; ++i) {
      await new Promise((r) => setTimeout(r, 20));
    }
    // 100 samples x (prompt + 20) tokens pass the 2000-token budget; the prompt alone would not.
    const many = await post(server.url, '/v1/chat/completions', chatBody({ n: 100, max_tokens: 20 }));
    assertOpenAIError(many, 429);
    assert.equal(many.headers.get('retry-after'), '1');
    assert.match(many.json.error.message, /n x \(prompt \+ max_tokens\)/);
    // One sample with a long max_tokens weighs as much.
    const long = await post(server.url, '/v1/messages', { model: MODEL, max_tokens: 2500, messages: [{ role: 'user', content: 'hi' }] });
    assertAnthropicError(long, 529);
    // Two samples of a short request fit beside the waiting one.
    const two = post(server.url, '/v1/chat/completions', chatBody({ n: 2 }));
    controller.abort();
    const [done, pair] = await Promise.all([queued, two]);
    assert.equal(done.status, 200, done.text);
    assert.equal(pair.status, 200, pair.text);
    assert.equal(pair.json.choices.length, 2);
    await waitIdle(server.url);
  });
});
