// No request can stall or end `deepinfer serve` (issue 30). SIGTERM ends the open requests with
// each API's error (the official clients see it), saves their KV pages and exits within
// --shutdown-timeout, also when the engine is stuck in a step. A failed step ends only its
// request, with a 500 or an error event, and the server goes on; a lost device turns /health to
// 503. Failures come from DEEPINFER_FAULT, the backend's failure-injection test hook
// (src/runtime/fault_injection.h).
import assert from 'node:assert/strict';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { MODEL, metrics, startServer } from './harness.mjs';

// Starts a server for test t; it is killed when t ends, so a failed test leaves none behind.
async function serverFor(t, args, env = {}) {
  const server = await startServer(args, undefined, env);
  t.after(() => {
    if (server.child.exitCode === null && server.child.signalCode === null) server.child.kill('SIGKILL');
  });
  return server;
}

const clients = (url) => ({
  openai: new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 }),
  anthropic: new Anthropic({ baseURL: url, apiKey: 'unused', maxRetries: 0 }),
});

async function post(url, route, body) {
  const res = await fetch(url + route, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, text, json };
}

// Iterates an SDK stream to its end: the events before it ended, and the error it ended with.
// started resolves at the first event.
function consume(stream) {
  let resolveStarted;
  const started = new Promise((r) => { resolveStarted = r; });
  const done = (async () => {
    const events = [];
    try {
      for await (const event of stream) {
        events.push(event);
        resolveStarted();
      }
      return { events, error: null };
    } catch (error) {
      return { events, error };
    } finally {
      resolveStarted();
    }
  })();
  return { started, done };
}

async function until(condition, what, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// Sends SIGTERM; resolves with the exit code and seconds taken, or { code: 'hung' } after limitS
// (the server is then killed).
async function terminate(server, limitS) {
  const start = Date.now();
  const exited = once(server.child, 'exit');
  server.child.kill('SIGTERM');
  const timer = new Promise((r) => setTimeout(r, limitS * 1000, 'hung'));
  const outcome = await Promise.race([exited, timer]);
  if (outcome === 'hung') {
    server.child.kill('SIGKILL');
    return { code: 'hung', seconds: limitS };
  }
  return { code: outcome[0] ?? outcome[1], seconds: (Date.now() - start) / 1000 };
}

function countPages(dir) {
  let n = 0;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile() && entry.name.endsWith('.page')) ++n;
  }
  return n;
}

test('SIGTERM ends open streams with an error event, saves their KV pages and exits in time', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deepinfer-shutdown-'));
  try {
    const server = await serverFor(t, ['--shutdown-timeout', '3', '--kv-cache-dir', dir]);
    const { openai, anthropic } = clients(server.url);
    // A prompt of several 16-token pages, so the running request has full pages to save.
    const document = Array.from({ length: 12 }, (_, i) => `line ${i} of a document`).join('\n');
    const chat = consume(await openai.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: document }], max_tokens: 3000, ignore_eos: true, stream: true,
    }));
    const messages = consume(await anthropic.messages.create({
      model: MODEL, max_tokens: 3000, messages: [{ role: 'user', content: 'Hi' }], stream: true,
    }));
    const whole = post(server.url, '/v1/completions', { model: MODEL, prompt: 'Once', max_tokens: 3000, ignore_eos: true });
    await Promise.all([chat.started, messages.started]);
    await until(async () => (await metrics(server.url)).deepinfer_num_requests_running === 3, 'three running requests');

    const exit = await terminate(server, 15);
    assert.equal(exit.code, 0, server.stderr());
    assert.ok(exit.seconds < 3, `exit took ${exit.seconds} s with --shutdown-timeout 3`);
    const [chatEnd, messagesEnd, wholeEnd] = await Promise.all([chat.done, messages.done, whole]);
    assert.ok(chatEnd.events.length > 0);
    assert.match(String(chatEnd.error?.message), /shutting down/);
    assert.ok(messagesEnd.events.length > 0);
    assert.match(String(messagesEnd.error?.message), /shutting down/);
    assert.equal(wholeEnd.status, 503, wholeEnd.text);
    assert.match(wholeEnd.json.error.message, /shutting down/);
    // The running requests were aborted, not dropped: their computed pages reached the disk.
    assert.ok(countPages(dir) > 0, `no page saved in ${dir}: ${server.stderr()}`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('SIGTERM ends a server whose engine is stuck in a step within the bound', async (t) => {
  // The third forward pass never returns.
  const server = await serverFor(t, ['--shutdown-timeout', '2'], { DEEPINFER_FAULT: 'hang:embedding:3' });
  const { openai } = clients(server.url);
  const chat = consume(await openai.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 50, ignore_eos: true, stream: true,
  }));
  // Two steps ran (two tokens out); the third is stuck.
  await until(async () => (await metrics(server.url)).deepinfer_generation_tokens_total === 2, 'two tokens');
  await new Promise((r) => setTimeout(r, 200));
  const exit = await terminate(server, 15);
  assert.equal(exit.code, 1, `expected the forced exit: ${server.stderr()}`);
  assert.ok(exit.seconds < 2 + 1, `exit took ${exit.seconds} s with --shutdown-timeout 2`);
  assert.match(server.stderr(), /the engine thread is stuck, inside a step for/);
  assert.match(server.stderr(), /shutdown: the engine thread did not end its step; exiting now/);
  const end = await chat.done;
  assert.equal(end.events.length > 0, true);
  assert.match(String(end.error?.message), /shutting down/);
});

test('a failed step ends its request with an error event; the server serves on', async (t) => {
  // The second forward pass throws: the stream's first token is out, then the step fails.
  const server = await serverFor(t, [], { DEEPINFER_FAULT: 'throw:embedding:2' });
  const { openai, anthropic } = clients(server.url);
  const chat = consume(await openai.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 20, ignore_eos: true, stream: true,
  }));
  const end = await chat.done;
  assert.ok(end.events.length > 0);
  assert.match(String(end.error?.message), /the engine failed while running this request: injected fault/);
  const next = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 });
  assert.equal(next.choices[0].finish_reason, 'length');
  const message = await anthropic.messages.create({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(message.stop_reason, 'max_tokens');
  assert.equal((await fetch(`${server.url}/health`)).status, 200);
  const m = await metrics(server.url);
  assert.equal(m['deepinfer_requests_total{endpoint="/v1/chat/completions",status="500"}'], 1);
  assert.match(server.stderr(), /request \d+ failed in the engine: injected fault/);
  await server.stop();
});

test('a failed step answers a whole request with a 500 in its API\'s shape', async (t) => {
  const server = await serverFor(t, [], { DEEPINFER_FAULT: 'throw:embedding:1' });
  const r = await post(server.url, '/v1/messages', { model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(r.status, 500, r.text);
  assert.equal(r.json.type, 'error');
  assert.equal(r.json.error.type, 'api_error');
  assert.match(r.json.error.message, /injected fault/);
  assert.equal((await post(server.url, '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 })).status, 200);
  await server.stop();
});

test('a lost device turns /health to 503 with the reason, logged, and refuses every request', async (t) => {
  const server = await serverFor(t, [], { DEEPINFER_FAULT: 'device_lost:embedding:1' });
  const chat = { model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 };
  const failed = await post(server.url, '/v1/chat/completions', chat);
  assert.equal(failed.status, 503, failed.text);
  assert.match(failed.json.error.message, /the device failed: .*the device is lost/);
  const health = await fetch(`${server.url}/health`);
  assert.equal(health.status, 503);
  assert.match((await health.json()).error.message, /the device failed/);
  const refused = await post(server.url, '/v1/messages', { model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(refused.status, 503, refused.text);
  assert.equal(refused.json.type, 'error');
  assert.match(server.stderr(), /\[deepinfer error\] the device failed: .*the server can run nothing more/);
  await server.stop();  // still a clean exit on SIGTERM
});
