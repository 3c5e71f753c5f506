// The persistent KV store behind `deepinfer serve --kv-cache-dir`: a long prompt served by one
// server process is served again by a second process on the same directory with its prefix
// loaded from disk, which /metrics counts per tier and the usage reports as cached tokens.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { MODEL, metrics, startServer, waitIdle } from './harness.mjs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deepinfer-kv-store-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));

// Several 16-token pages of text; always loads, since the tiny model recomputes faster than it reads.
const args = ['--kv-cache-dir', dir, '--kv-cache-load', 'always'];
const prompt = Array.from({ length: 40 }, (_, i) => `line ${i} of a long shared document`).join('\n');

async function complete(url) {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: 2, temperature: 0 }),
  });
  assert.equal(res.status, 200, await (res.status === 200 ? '' : res.text()));
  return res.json();
}

test('a restarted server loads the prompt prefix from the disk tier', async () => {
  const first = await startServer(args);
  let before;
  try {
    const body = await complete(first.url);
    assert.ok(body.usage.prompt_tokens > 64, `prompt too short: ${body.usage.prompt_tokens}`);
    assert.equal(body.usage.prompt_tokens_details?.cached_tokens ?? 0, 0);
    before = await waitIdle(first.url);
    assert.equal(before['deepinfer_kv_store_hits_total{tier="disk"}'], 0);
    assert.ok('deepinfer_kv_store_misses_total{tier="host"}' in before, 'host tier series missing');
    assert.ok('deepinfer_kv_store_bytes{tier="disk"}' in before, 'disk gauge missing');
  } finally {
    await first.stop();  // drains the store's write queue to disk
  }
  const second = await startServer(args);
  try {
    const body = await complete(second.url);
    assert.ok(body.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(body.usage));
    const m = await metrics(second.url);
    assert.ok(m['deepinfer_kv_store_hits_total{tier="disk"}'] > 0, JSON.stringify(m));
    assert.ok(m.deepinfer_kv_store_pages_loaded_total > 0);
    assert.ok(m['deepinfer_kv_store_pages{tier="disk"}'] > 0);
  } finally {
    await second.stop();
  }
});
