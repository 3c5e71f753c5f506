// The web playground (`deepinfer serve --ui`, src/server/ui): its files come from the binary with
// content types, ETags and revalidation; nothing else is reachable through its paths; without --ui
// the paths are 404. Then the page itself in headless Chromium (Debian's chromium, driven by
// puppeteer-core): the model's name, streamed replies, the stop button, structured output, tool
// calls, reasoning apart from the answer, live metrics and the API key; a screenshot is left in
// DEEPINFER_TEST_ARTIFACTS (CTest: the build's test-artifacts/).
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import puppeteer from 'puppeteer-core';
import { MODEL, rawExchange, startServer, waitIdle } from './harness.mjs';

const model = process.env.DEEPINFER_DEFAULT_MODEL;
const Ajv = createRequire(import.meta.url)('ajv');
const ajv = new Ajv({ strict: false });

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

// Debian's chromium: the binary itself (its /usr/bin launcher only adds desktop flags).
const chromium = [process.env.CHROMIUM, '/usr/lib/chromium/chromium', '/usr/bin/chromium'].find((p) => p && existsSync(p));
const noBrowser = chromium ? false
  : 'chromium is not installed (Debian package chromium, which tools/install_deps.sh installs): browser tests skipped';

async function launchBrowser() {
  return puppeteer.launch({ executablePath: chromium, headless: true, args: ['--no-sandbox', '--headless=new', '--disable-gpu'] });
}

const pageErrors = [];

async function openPage(browser, url) {
  const page = await browser.newPage();
  page.on('pageerror', (error) => pageErrors.push(error.message));
  page.setDefaultTimeout(20000);
  await page.setViewport({ width: 1280, height: 860 });
  await page.goto(url);
  await page.waitForFunction(() => document.body.dataset.state === 'idle');
  return page;
}

// Sets an input's value as a user edit does (the page reads the fields when it sends).
async function setField(page, id, value) {
  await page.$eval(`#${id}`, (element, v) => {
    if (element.type === 'checkbox') element.checked = v; else element.value = v;
    element.dispatchEvent(new Event('change', { bubbles: true }));
  }, value);
}

// Types a message, sends it and returns the index of its reply.
async function send(page, text) {
  const index = await page.$$eval('.message.assistant', (replies) => replies.length);
  await page.type('#prompt', text);
  await page.click('#send');
  await page.waitForFunction((i) => document.querySelectorAll('.message.assistant').length > i, {}, index);
  return index;
}

// Waits until the reply has ended (done, stopped or failed) and the page is idle; returns what it shows.
async function reply(page, index) {
  await page.waitForFunction((i) => document.querySelectorAll('.message.assistant')[i].dataset.state !== 'streaming' &&
                                    document.body.dataset.state === 'idle', {}, index);
  return page.evaluate((i) => {
    const item = document.querySelectorAll('.message.assistant')[i];
    const text = (selector) => item.querySelector(selector)?.textContent ?? '';
    return {
      state: item.dataset.state,
      completionTokens: item.dataset.completionTokens,
      content: text('.content'),
      reasoning: item.querySelector('.reasoning').hidden ? null : text('.reasoning-text'),
      reasoningOpen: item.querySelector('.reasoning').open,
      toolCalls: [...item.querySelectorAll('.tool-call')].map((call) => ({
        name: call.querySelector('.tool-name').textContent, arguments: call.querySelector('.tool-arguments').textContent })),
      stats: text('.stats'),
      error: text('.error'),
    };
  }, index);
}

describe('the playground in a browser', { skip: noBrowser }, () => {
  let server;
  let browser;
  let page;
  const requestBodies = [];  // of the page's chat requests, as sent
  before(async () => {
    [server, browser] = await Promise.all([startServer(['--ui'], model), launchBrowser()]);
    page = await openPage(browser, server.url);
    page.on('request', (request) => {
      if (request.url().endsWith('/v1/chat/completions')) requestBodies.push(JSON.parse(request.postData()));
    });
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  test('the page shows the served model, its context length and the live metrics', async () => {
    assert.equal(await page.$eval('#model-name', (e) => e.textContent), MODEL);
    assert.equal(await page.$eval('#context-length', (e) => e.textContent), '2,048 tokens of context');
    await page.waitForFunction(() => /%$/.test(document.getElementById('metric-kv').textContent));
    assert.equal(await page.$eval('#metric-running', (e) => e.textContent), '0');
    assert.equal(await page.$eval('#api-key-row', (e) => e.hidden), true, 'no key field on a server without a key');
  });

  test('a reply streams in: its text grows over several DOM updates, then shows tokens and tokens/s', async () => {
    await page.evaluate(() => {
      // Every distinct text the streaming answer showed, as the DOM changed.
      window.answerTexts = [];
      new MutationObserver(() => {
        const replies = document.querySelectorAll('.message.assistant');
        const last = replies[replies.length - 1];
        if (last?.dataset.state !== 'streaming') return;
        const text = last.querySelector('.content').textContent;
        if (text && text !== window.answerTexts[window.answerTexts.length - 1]) window.answerTexts.push(text);
      }).observe(document.getElementById('messages'), { subtree: true, childList: true, characterData: true });
    });
    await setField(page, 'max-tokens', '48');
    await setField(page, 'seed', '1');
    const shown = await reply(page, await send(page, 'Write a function that sorts a list'));
    assert.equal(shown.state, 'done', JSON.stringify(shown));
    const texts = await page.evaluate(() => window.answerTexts);
    assert.ok(texts.length > 1, `the answer appeared in ${texts.length} update(s): ${JSON.stringify(texts)}`);
    for (const text of texts) assert.ok(shown.content.startsWith(text), 'each update extends the answer');
    assert.ok(Number(shown.completionTokens) > 1 && Number(shown.completionTokens) <= 48, shown.completionTokens);
    assert.match(shown.stats, new RegExp(`^${shown.completionTokens} tokens · [0-9.]+ tok/s · first token \\d+ ms · prompt \\d+ tokens · (stop|length)$`));
  });

  test('the stop button ends a long generation; the server goes idle and the metrics say so', async () => {
    await setField(page, 'max-tokens', '1500');
    await setField(page, 'temperature', '1');
    // Seed 2 runs to max_tokens on the machines tried; should another CPU's numerics end it
    // early, the next seed is tried.
    let index;
    for (const seed of [2, 5, 7, 11]) {
      await page.click('#new-chat');
      await setField(page, 'seed', String(seed));
      index = await send(page, 'Write a function that sorts a list');
      // Stopped once its first tokens arrived and the page's own metrics poll saw it running.
      const running = await page.waitForFunction((i) => {
        const item = document.querySelectorAll('.message.assistant')[i];
        if (item.dataset.state !== 'streaming') return 'ended';
        return document.getElementById('metric-running').textContent === '1' &&
               item.querySelector('.content').textContent !== '' && 'running';
      }, {}, index);
      if (await running.jsonValue() === 'running') break;
      index = undefined;
    }
    assert.ok(index !== undefined, 'every seed ended on its own before the metrics showed it running');
    assert.equal(await page.$eval('#stop', (e) => e.hidden), false);
    await page.click('#stop');
    const shown = await reply(page, index);
    assert.equal(shown.state, 'stopped', JSON.stringify(shown));
    assert.match(shown.stats, /stopped$/);
    assert.ok(shown.content.length > 0);
    assert.equal(await page.$eval('#send', (e) => e.hidden), false);
    await waitIdle(server.url, 5000);
    await page.waitForFunction(() => document.getElementById('metric-running').textContent === '0');
  });

  test('a pasted JSON schema gives an answer that parses and validates', async () => {
    const schema = {
      type: 'object', additionalProperties: false, required: ['name', 'age', 'tags'],
      properties: { name: { type: 'string', minLength: 1, maxLength: 12 }, age: { type: 'integer', minimum: 0, maximum: 120 },
                    tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, maxItems: 3 } },
    };
    await page.click('#new-chat');
    await setField(page, 'max-tokens', '200');
    await setField(page, 'seed', '3');
    await page.click('#schema-section summary');
    await setField(page, 'schema-on', true);
    await setField(page, 'schema', JSON.stringify(schema, null, 2));
    const shown = await reply(page, await send(page, 'Describe a person as JSON.'));
    await setField(page, 'schema-on', false);
    assert.equal(shown.state, 'done', JSON.stringify(shown));
    const answer = JSON.parse(shown.content);
    const valid = ajv.compile(schema);
    assert.ok(valid(answer), `${shown.content}: ${JSON.stringify(valid.errors)}`);
    assert.match(shown.stats, /stop$/);
  });

  test('bad settings are named and nothing is sent', async () => {
    await setField(page, 'temperature', '7');
    const replies = await page.$$eval('.message.assistant', (r) => r.length);
    await page.type('#prompt', 'hello');
    await page.click('#send');
    assert.match(await page.$eval('#settings-error', (e) => e.textContent), /Temperature must be a number in \[0, 2\]/);
    assert.equal(await page.$$eval('.message.assistant', (r) => r.length), replies);
    await setField(page, 'temperature', '1');
    await page.$eval('#prompt', (e) => { e.value = ''; });
  });

  test('tool calls are shown with their streamed arguments', async () => {
    const parameters = { type: 'object', additionalProperties: false, required: ['city', 'days'],
                         properties: { city: { type: 'string', minLength: 1, maxLength: 8 },
                                       days: { type: 'integer', minimum: 1, maximum: 14 } } };
    await setField(page, 'max-tokens', '200');
    await page.click('#tools-section summary');
    await setField(page, 'tools', JSON.stringify([{ type: 'function', function: { name: 'get_weather', strict: true, parameters } }]));
    await setField(page, 'tool-choice', 'required');
    const shown = await reply(page, await send(page, 'Weather in Paris for three days?'));
    assert.equal(shown.state, 'done', JSON.stringify(shown));
    assert.equal(shown.toolCalls.length, 1, JSON.stringify(shown));
    assert.equal(shown.toolCalls[0].name, 'tool call: get_weather');
    const valid = ajv.compile(parameters);
    assert.ok(valid(JSON.parse(shown.toolCalls[0].arguments)), shown.toolCalls[0].arguments);
    assert.match(shown.stats, /tool_calls$/);
    // The request carried the earlier exchange (the schema's), the tool and no response_format.
    const sent = requestBodies[requestBodies.length - 1];
    assert.deepEqual(sent.messages.map((m) => m.role), ['user', 'assistant', 'user']);
    assert.equal(sent.messages[1].content, (await page.$$eval('.message.assistant .content', (c) => c[0].textContent)));
    assert.equal(sent.tool_choice, 'required');
    assert.equal(sent.response_format, undefined);
    assert.deepEqual({ stream: sent.stream, max_tokens: sent.max_tokens, seed: sent.seed, temperature: sent.temperature, top_p: sent.top_p },
                     { stream: true, max_tokens: 200, seed: 3, temperature: 1, top_p: 1 });

    const artifacts = process.env.DEEPINFER_TEST_ARTIFACTS ?? os.tmpdir();
    mkdirSync(artifacts, { recursive: true });
    await page.screenshot({ path: path.join(artifacts, 'playground.png') });
    await setField(page, 'tools', '');
  });

  test('reasoning is shown apart from the answer, folded once the answer begins', async () => {
    // The default model has no reasoning format: this page gets a canned DeepSeek-style stream.
    const canned = await openPage(browser, server.url);
    await canned.setRequestInterception(true);
    canned.on('request', (request) => {
      if (!request.url().endsWith('/v1/chat/completions')) return request.continue();
      const chunk = (delta, finish = null) => ({ choices: [{ index: 0, delta, finish_reason: finish }] });
      const events = [chunk({ role: 'assistant', content: null, reasoning_content: '' }), chunk({ reasoning_content: 'The user ' }),
                      chunk({ reasoning_content: 'wants a list.' }), chunk({ content: 'Here ' }), chunk({ content: 'it is.' }, 'stop'),
                      { choices: [], usage: { prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 } }];
      const body = events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('') + 'data: [DONE]\n\n';
      return request.respond({ status: 200, contentType: 'text/event-stream', body });
    });
    const shown = await reply(canned, await send(canned, 'A list, please'));
    await canned.close();
    assert.equal(shown.state, 'done');
    assert.equal(shown.reasoning, 'The user wants a list.');
    assert.equal(shown.reasoningOpen, false);
    assert.equal(shown.content, 'Here it is.');
    assert.match(shown.stats, /^4 tokens · .* · prompt 9 tokens · stop$/);
  });

  test('the page raised no script errors', () => {
    assert.deepEqual(pageErrors, []);
  });
});

describe('the playground with --api-key', { skip: noBrowser }, () => {
  const key = 'playground-key';
  let server;
  let browser;
  before(async () => {
    [server, browser] = await Promise.all([startServer(['--ui', '--api-key', key], model), launchBrowser()]);
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  test('the page loads without the key; its calls fail without it and succeed with it', async () => {
    assert.equal((await fetch(`${server.url}/`)).status, 200);
    const chat = (headers) => fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }) });
    assert.equal((await chat({})).status, 401);

    const page = await openPage(browser, server.url);
    const authorizations = [];
    page.on('request', (request) => {
      if (request.url().endsWith('/v1/chat/completions')) authorizations.push(request.headers().authorization ?? null);
    });
    assert.equal(await page.$eval('#api-key-row', (e) => e.hidden), false, 'a 401 shows the key field');
    assert.match(await page.$eval('#server-status', (e) => e.textContent), /invalid API key/);
    await setField(page, 'max-tokens', '8');
    const refused = await reply(page, await send(page, 'hello'));
    assert.equal(refused.state, 'failed');
    assert.match(refused.error, /invalid API key/);

    await page.type('#api-key', key);
    await page.keyboard.press('Tab');  // a change event: the page reloads the model with the key
    await page.waitForFunction((name) => document.getElementById('model-name').textContent === name, {}, MODEL);
    const answered = await reply(page, await send(page, 'hello'));
    assert.equal(answered.state, 'done', JSON.stringify(answered));
    assert.deepEqual(authorizations, [null, `Bearer ${key}`]);
    assert.equal((await chat({ authorization: `Bearer ${key}` })).status, 200);
    assert.deepEqual(pageErrors, []);
  });
});
