// What the cluster benchmarks (pd_ttft.mjs, router_overhead.mjs) share: the processes they start on
// loopback (a deepinfer command until it prints its URL, a redis-server on a free port; each child
// is pushed onto `children` for the caller to stop), one timed streamed chat completion, and the
// percentile they report.
import { spawn } from 'node:child_process';
import { freePort } from '../tests/node/server/cluster_harness.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function startListening(cli, args, children) {
  const child = spawn(cli, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  for (;;) {
    const m = out.match(/listening on (http:\/\/\S+)/);
    if (m) return m[1];
    if (child.exitCode !== null) throw new Error(`${args.join(' ')} exited`);
    await sleep(20);
  }
}

export async function startRedisServer(children) {
  const port = await freePort();
  children.push(spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
                                       '--logfile', '/dev/null'], { stdio: 'ignore' }));
  await sleep(300);
  return `redis://127.0.0.1:${port}`;
}

// One greedy streamed chat completion: time to the first content frame and to the end (ms), and
// the streamed text.
// ttftMs: request sent -> the first streamed chunk with content; secondMs: -> the second chunk with
// non-empty text (on a disaggregated cluster, the first from the decode worker).
export async function timedChat(url, content, maxTokens) {
  const started = process.hrtime.bigint();
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content }], max_tokens: maxTokens, temperature: 0,
                           stream: true }) });
  const reader = response.body.getReader();
  let body = '';
  let first = null;
  const textTimes = [];
  let scanned = 0;  // body[0, scanned) holds whole lines already looked at
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    body += new TextDecoder().decode(value);
    const now = process.hrtime.bigint();
    if (first === null && body.includes('"content"')) first = now;
    for (let end = body.indexOf('\n', scanned); end >= 0; end = body.indexOf('\n', scanned)) {
      const line = body.slice(scanned, end);
      scanned = end + 1;
      if (line.startsWith('data: {') && JSON.parse(line.slice(6)).choices[0]?.delta?.content) textTimes.push(now);
    }
  }
  const text = body.split('\n').filter((l) => l.startsWith('data: {'))
    .map((l) => JSON.parse(l.slice(6)).choices[0]?.delta?.content ?? '').join('');
  const ms = (t) => (t === undefined ? NaN : Number(t - started) / 1e6);
  return { ttftMs: ms(first), secondMs: ms(textTimes[1]), e2eMs: ms(process.hrtime.bigint()), text };
}

export const pct = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))];
