// xgrammar oracle for the grammar tests: node xgrammar_oracle.cjs REQUEST.json ANSWER.json
// (a) verdicts: does xgrammar compile each JSON Schema, and accept each instance string?
// (b) walks: random token walks driven by xgrammar's masks on a real tokenizer; the masks
//     (base64 of the int32 bitmask) and the chosen tokens, for the C++ side to replay.
// @mlc-ai/web-xgrammar ships a UMD bundle in a "type": "module" package, which node refuses to
// require(); this shim evaluates the bundle as CommonJS (it needs no browser API in node 20).
const fs = require('fs');
const path = require('path');

function loadXgrammar() {
  const file = require.resolve('@mlc-ai/web-xgrammar', { paths: [path.join(__dirname, '../node')] });
  const mod = { exports: {} };
  new Function('exports', 'module', 'require', '__filename', '__dirname', fs.readFileSync(file, 'utf8'))(
    mod.exports, mod, require, file, path.dirname(file));
  return mod.exports;
}

// Mulberry32: a small seeded PRNG so walks are reproducible.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const kSeparators = [',', ':'];

function grammarOf(xg, spec) {
  if (spec.json_schema !== undefined) return xg.Grammar.fromJSONSchema(spec.json_schema, false, -1, kSeparators, true);
  return xg.Grammar.fromEBNF(spec.ebnf);
}

async function verdicts(xg, items) {
  const out = [];
  for (const item of items) {
    let grammar;
    try {
      grammar = await xg.Grammar.fromJSONSchema(item.schema, false, -1, kSeparators, true);
    } catch (e) {
      out.push({ compiled: false, error: String(e.message || e).slice(0, 300) });
      continue;
    }
    const accepted = [];
    for (const instance of item.instances) accepted.push(await xg.Testings.isGrammarAcceptString(grammar, instance));
    grammar.dispose();
    out.push({ compiled: true, accepted });
  }
  return out;
}

function encodedVocab(tokenizerPath, size) {
  const tok = JSON.parse(fs.readFileSync(tokenizerPath, 'utf8'));
  const vocab = new Array(size).fill('');
  for (const [token, id] of Object.entries(tok.model.vocab)) if (id < size) vocab[id] = token;
  for (const added of tok.added_tokens || []) if (added.id < size) vocab[added.id] = added.content;
  return vocab;
}

async function walks(xg, items) {
  const out = [];
  for (const item of items) {
    const vocab = encodedVocab(item.tokenizer, item.vocab_size);
    const info = await xg.TokenizerInfo.createTokenizerInfo(vocab, 'byte_level', false, item.mask_size, item.stop_ids);
    const compiler = await xg.GrammarCompiler.createGrammarCompiler(info);
    const compiled = await compiler.compileGrammar(await grammarOf(xg, item));
    const matcher = await xg.GrammarMatcher.createGrammarMatcher(compiled, item.stop_ids);
    const excluded = new Set(item.excluded_ids);
    const random = rng(item.seed);
    const masks = [], tokens = [];
    for (let step = 0; step < item.steps && !matcher.isTerminated(); ++step) {
      const mask = await matcher.getNextTokenBitmask();
      masks.push(Buffer.from(mask.buffer, mask.byteOffset, mask.byteLength).toString('base64'));
      const allowed = [];
      for (let id = 0; id < item.mask_size; ++id) {
        if ((mask[id >> 5] >>> (id & 31)) & 1 && !excluded.has(id)) allowed.push(id);
      }
      const choices = allowed.filter((id) => !item.stop_ids.includes(id));
      if (choices.length === 0) break;
      const token = choices[Math.floor(random() * choices.length)];
      if (!matcher.acceptToken(token)) throw new Error('xgrammar refused a token of its own mask: ' + token);
      tokens.push(token);
    }
    out.push({ masks, tokens });
    matcher.dispose();
    compiler.dispose();
    info.dispose();
  }
  return out;
}

async function main() {
  const [requestPath, answerPath] = process.argv.slice(2);
  const request = JSON.parse(fs.readFileSync(requestPath, 'utf8'));
  const xg = loadXgrammar();
  const answer = {};
  if (request.verdicts) answer.verdicts = await verdicts(xg, request.verdicts);
  if (request.walks) answer.walks = await walks(xg, request.walks);
  fs.writeFileSync(answerPath, JSON.stringify(answer));
}

// bench/grammar_exactness.cjs seeds its mutants with the same PRNG.
module.exports = { rng };
if (require.main === module) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
