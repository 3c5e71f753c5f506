// The web playground (`deepinfer serve --ui`, src/server/ui): its files come from the binary with
// content types, ETags and revalidation; nothing else is reachable through its paths; without --ui
// the paths are 404.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { rawExchange, startServer } from './harness.mjs';

const model = process.env.DEEPINFER_DEFAULT_MODEL;

describe('the playground\'s files', () => {
  let server;
  before(async () => { server = await startServer(['--ui'], model); });
  after(async () => { await server.stop(); });

  test('GET / is the page, with its content type, ETag and a no-cache policy', async () => {
    const response = await fetch(`${server.url}/`);
    assert.equal(response.status, 200);
    assert.equal(response.headers.get('content-type'), 'text/html; charset=utf-8');
    assert.equal(response.headers.get('cache-control'), 'no-cache');
    assert.match(response.headers.get('etag'), /^"[0-9a-f]{16}"$/);
    assert.match(response.headers.get('content-security-policy'), /default-src 'self'/);
    assert.match(await response.text(), /<title>deepinfer playground<\/title>/);
  });

  test('an asset has its own content type, and a matching If-None-Match gets a 304', async () => {
    const response = await fetch(`${server.url}/ui/style.css`);
    assert.equal(response.status, 200);
    assert.equal(response.headers.get('content-type'), 'text/css; charset=utf-8');
    const etag = response.headers.get('etag');
    const again = await fetch(`${server.url}/ui/style.css`, { headers: { 'if-none-match': `"x", ${etag}` } });
    assert.equal(again.status, 304);
    assert.equal(await again.text(), '');
    const changed = await fetch(`${server.url}/ui/style.css`, { headers: { 'if-none-match': '"0000000000000000"' } });
    assert.equal(changed.status, 200);
  });

  test('unknown names and path traversal are 404, other methods 405; the server keeps serving', async () => {
    for (const path of ['/ui/nothing.js', '/ui/', '/ui/../../etc/passwd', '/ui/%2e%2e/%2e%2e/etc/passwd',
                        '/ui//etc/passwd', '/index.html']) {
      const raw = await rawExchange(server.url, `GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
      assert.match(raw, /^HTTP\/1\.1 404 /, path);
      assert.doesNotMatch(raw, /root:/, path);
    }
    const post = await fetch(`${server.url}/`, { method: 'POST', body: '{}' });
    assert.equal(post.status, 405);
    assert.equal(post.headers.get('allow'), 'GET');
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
  });
});

describe('without --ui', () => {
  test('/ and /ui/* are 404, naming the flag', async () => {
    const server = await startServer([], model);
    try {
      for (const path of ['/', '/ui/style.css']) {
        const response = await fetch(`${server.url}${path}`);
        assert.equal(response.status, 404);
        assert.match((await response.json()).error.message, /--ui/);
      }
    } finally {
      await server.stop();
    }
  });
});
