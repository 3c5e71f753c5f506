// A bounded load test: 64 concurrent streams over the four APIs, a quarter of the clients hanging
// up early. Every response completes or is cut cleanly, and afterwards the engine is idle: nothing
// waiting or running, KV usage 0, and the invariants check the server runs when idle holds
// (a failure there aborts the server, which stop() reports).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { MODEL, startServer, waitIdle } from './harness.mjs';

let server;
before(async () => { server = await startServer(['--threads', '2', '--max-num-seqs', '32']); });
after(async () => { await server.stop(); });

const routes = [
  ['/v1/chat/completions', (i) => ({ model: MODEL, messages: [{ role: 'user', content: `Request number ${i}` }], max_tokens: 8, stream: true, seed: i })],
  ['/v1/completions', (i) => ({ model: MODEL, prompt: `Prompt ${i}:`, max_tokens: 8, stream: true, seed: i })],
  ['/v1/responses', (i) => ({ model: MODEL, input: `Question ${i}?`, max_output_tokens: 8, stream: true })],
  ['/v1/messages', (i) => ({ model: MODEL, messages: [{ role: 'user', content: `Message ${i}` }], max_tokens: 8, stream: true })],
];

// The marker of each API's last frame.
const endMarker = { '/v1/chat/completions': /data: \[DONE\]\n\n$/, '/v1/completions': /data: \[DONE\]\n\n$/,
                    '/v1/responses': /event: response\.(completed|incomplete)\n/, '/v1/messages': /event: message_stop\n/ };

async function oneStream(i) {
  const [path, body] = routes[i % routes.length];
  const hangUp = i % 4 === 3;
  const controller = new AbortController();
  const res = await fetch(server.url + path, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body(i)), signal: controller.signal,
  });
  assert.equal(res.status, 200, await (res.status === 200 ? '' : res.text()));
  assert.match(res.headers.get('content-type'), /text\/event-stream/);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    if (hangUp && text.includes('\n\n')) {
      controller.abort();
      return 'cut';
    }
  }
  assert.match(text, endMarker[path], `${path} stream ended badly: ${text.slice(-300)}`);
  return 'done';
}

test('64 concurrent streams, some cut early, leave the engine idle', async () => {
  const outcomes = await Promise.all(Array.from({ length: 64 }, (_, i) => oneStream(i)));
  assert.equal(outcomes.filter((o) => o === 'done').length, 48);
  assert.equal(outcomes.filter((o) => o === 'cut').length, 16);
  const m = await waitIdle(server.url);
  assert.equal(m.deepinfer_num_requests_running, 0);
  assert.equal(m.deepinfer_num_requests_waiting, 0);
  assert.equal(m.deepinfer_kv_cache_usage_ratio, 0);
  let ok = 0;
  for (const [path] of routes) ok += m[`deepinfer_requests_total{endpoint="${path}",status="200"}`] ?? 0;
  assert.equal(ok, 64);
  assert.ok(m.deepinfer_time_to_first_token_seconds_count >= 48);
  // The server still answers after the storm.
  const again = await fetch(`${server.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt: 'after', max_tokens: 3 }),
  });
  assert.equal(again.status, 200);
  await waitIdle(server.url);
});

// `deepinfer bench serve --json`: one line a concurrency level, whose request and token counts are
// the ones the server's own counters saw, and whose percentiles are ordered.
test('bench serve writes each level as JSON, matching the server\'s counters', async () => {
  const before = await waitIdle(server.url);
  const dir = mkdtempSync(path.join(tmpdir(), 'bench-serve-'));
  try {
    const file = path.join(dir, 'serve.jsonl');
    await promisify(execFile)(process.env.DEEPINFER_CLI, [
      'bench', 'serve', '--url', server.url, '--concurrency', '1,3', '--num-prompts', '6', '--input-tokens', '12',
      '--output-tokens', '5', '--json', file, '--label', 'load test']);
    const lines = readFileSync(file, 'utf8').trim().split('\n').map((line) => JSON.parse(line));
    assert.deepEqual(lines.map((l) => l.concurrency), [1, 3]);
    for (const l of lines) {
      assert.equal(l.kind, 'serve');
      assert.equal(l.label, 'load test');
      assert.equal(l.model, MODEL);
      assert.equal(l.requests, 6);
      assert.equal(l.failed, 0);
      assert.ok(Math.abs(l.output_tok_s * l.seconds - 6 * 5) < 1e-6, JSON.stringify(l));
      assert.ok(Math.abs(l.requests_per_s * l.seconds - 6) < 1e-6, JSON.stringify(l));
      for (const p of [l.ttft_ms, l.itl_ms]) assert.ok(p.p50 > 0 && p.p50 <= p.p90 && p.p90 <= p.p99, JSON.stringify(p));
    }
    const after = await waitIdle(server.url);
    const delta = (name) => (after[name] ?? 0) - (before[name] ?? 0);
    assert.equal(delta('deepinfer_requests_total{endpoint="/v1/completions",status="200"}'), 12);
    assert.equal(delta('deepinfer_prompt_tokens_total'), 12 * 12);
    assert.equal(delta('deepinfer_generation_tokens_total'), 12 * 5);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
