// A bounded load test: 64 concurrent streams over the four APIs, a quarter of the clients hanging
// up early. Every response completes or is cut cleanly, and afterwards the engine is idle: nothing
// waiting or running, KV usage 0, and the invariants check the server runs when idle holds
// (a failure there aborts the server, which stop() reports).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
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
