// Structured-output benchmark, xgrammar's side (npm @mlc-ai/web-xgrammar, WASM, single thread):
// the same MaskBench schemas and tokenizer as deepinfer-bench-grammar; compile time and per-token
// mask time along a seeded random walk; prints one markdown row.
// Usage: node bench/bench_grammar_xgrammar.cjs TOKENIZER_JSON SCHEMA_DIR [STEPS]
const fs = require('fs');
const path = require('path');

const nodeDir = path.join(__dirname, '../tests/node');
const file = require.resolve('@mlc-ai/web-xgrammar', { paths: [nodeDir] });
const mod = { exports: {} };
new Function('exports', 'module', 'require', '__filename', '__dirname', fs.readFileSync(file, 'utf8'))(
  mod.exports, mod, require, file, path.dirname(file));
const xg = mod.exports;

function percentile(values, p) {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

(async () => {
  const [tokenizerPath, schemaDir, stepsArg] = process.argv.slice(2);
  const steps = Number(stepsArg || 32);
  const tok = JSON.parse(fs.readFileSync(tokenizerPath, 'utf8'));
  let size = 0;
  for (const id of Object.values(tok.model.vocab)) size = Math.max(size, id + 1);
  for (const a of tok.added_tokens) size = Math.max(size, a.id + 1);
  const vocab = new Array(size).fill('');
  for (const [t, id] of Object.entries(tok.model.vocab)) vocab[id] = t;
  for (const a of tok.added_tokens) vocab[a.id] = a.content;
  const info = await xg.TokenizerInfo.createTokenizerInfo(vocab, 'byte_level', false, size);
  const compiler = await xg.GrammarCompiler.createGrammarCompiler(info, false);
  let seed = 1234;
  const random = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 4294967296);
  const compileMs = [], maskUs = [];
  let total = 0, compiled = 0;
  for (const name of fs.readdirSync(schemaDir).sort()) {
    const schema = JSON.stringify(JSON.parse(fs.readFileSync(path.join(schemaDir, name), 'utf8')).schema);
    ++total;
    let grammar;
    const start = process.hrtime.bigint();
    try {
      grammar = await compiler.compileJSONSchema(schema, false, -1, [',', ':'], true);
    } catch (e) {
      continue;
    }
    compileMs.push(Number(process.hrtime.bigint() - start) / 1e6);
    ++compiled;
    const matcher = await xg.GrammarMatcher.createGrammarMatcher(grammar);
    for (let step = 0; step < steps && !matcher.isTerminated(); ++step) {
      const t = process.hrtime.bigint();
      const mask = await matcher.getNextTokenBitmask();
      maskUs.push(Number(process.hrtime.bigint() - t) / 1e3);
      const allowed = [];
      for (let id = 0; id < size; ++id) if ((mask[id >> 5] >>> (id & 31)) & 1) allowed.push(id);
      if (allowed.length === 0) break;
      matcher.acceptToken(allowed[Math.floor(random() * allowed.length)]);
    }
    matcher.dispose();
    grammar.dispose();
  }
  const f = (x, d) => x.toFixed(d);
  console.log(`| xgrammar 0.1.27 (WASM) | ${compiled}/${total} | ${f(percentile(compileMs, 0.5), 2)} | ` +
              `${f(percentile(compileMs, 0.99), 2)} | ${f(percentile(maskUs, 0.5), 1)} | ${f(percentile(maskUs, 0.99), 1)} |`);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
