// Exactness of each engine's compiled JSON Schema grammar, with ajv as the oracle, both ways: per
// MaskBench schema, the labelled instances ajv rejects plus seeded mutants of the valid ones
// (dropped/added keys, changed types, duplicated items, values past bounds/patterns/enums) that
// ajv rejects; a schema over-accepts when an engine accepts any of them. The labelled instances
// and mutants ajv accepts are the positives: an engine that rejects one falsely rejects. Prints
// markdown.
// Usage: node bench/grammar_exactness.cjs DEEPINFER_BENCH_BIN TOKENIZER_DIR SCHEMA_DIR [MUTANTS]
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');

// The grammar tests' oracles: ajv with their format checks (other formats only annotate in ajv,
// so they never make a mutant count as invalid) and their seeded PRNG.
const { makeAjv } = require('../tests/grammar/ajv_validate.cjs');
const { rng } = require('../tests/grammar/xgrammar_oracle.cjs');

// ajv 8 knows only draft-06 and later: drop "$schema", draft-04's schema "id" and its boolean
// exclusiveMinimum/Maximum (rewritten as draft-06 numbers) so draft-04 schemas load; a schema ajv
// still cannot compile is reported as unchecked.
function toDraft6(s) {
  if (Array.isArray(s)) return s.forEach(toDraft6);
  if (!s || typeof s !== 'object') return;
  if (typeof s.id === 'string') delete s.id;
  for (const [flag, bound] of [['exclusiveMinimum', 'minimum'], ['exclusiveMaximum', 'maximum']]) {
    if (typeof s[flag] !== 'boolean') continue;
    if (s[flag] && typeof s[bound] === 'number') s[flag] = s[bound], delete s[bound];
    else delete s[flag];
  }
  for (const [k, v] of Object.entries(s)) if (!['const', 'enum', 'default', 'examples'].includes(k)) toDraft6(v);
}

function ajvValidator(schema) {
  const copy = JSON.parse(JSON.stringify(schema));
  if (copy && typeof copy === 'object') delete copy.$schema;
  toDraft6(copy);
  try {
    return makeAjv({ logger: false }).compile(copy);
  } catch (e) {
    return null;
  }
}

// Every property name and enum/const value the schema mentions: mutants reuse them, so they hit
// dependencies, not, oneOf overlaps and enum edges rather than only unknown keys.
function schemaVocabulary(schema) {
  const names = new Set(), values = [];
  const walk = (s) => {
    if (Array.isArray(s)) return s.forEach(walk);
    if (!s || typeof s !== 'object') return;
    for (const key of ['properties', 'patternProperties', 'dependencies', 'dependentRequired', 'dependentSchemas'])
      if (s[key] && typeof s[key] === 'object') Object.keys(s[key]).forEach((k) => names.add(k));
    if (Array.isArray(s.required)) s.required.forEach((k) => typeof k === 'string' && names.add(k));
    if (Array.isArray(s.enum)) values.push(...s.enum);
    if ('const' in s) values.push(s.const);
    for (const v of Object.values(s)) walk(v);
  };
  walk(schema);
  return { names: [...names], values };
}

// The containers and leaves of value, each as a parent + key (the root has parent null).
function slots(value) {
  const out = [{ parent: null, key: null, value }];
  const walk = (v) => {
    if (Array.isArray(v)) v.forEach((x, i) => (out.push({ parent: v, key: i, value: x }), walk(x)));
    else if (v && typeof v === 'object') {
      for (const k of Object.keys(v)) out.push({ parent: v, key: k, value: v[k] }), walk(v[k]);
    }
  };
  walk(value);
  return out;
}

const kOtherTypes = [null, true, 0, -1, 1.5, '', 'x', [], {}, 1e9, -1e9];

// One random mutation of a deep copy of instance; returns the new root.
function mutate(instance, vocab, random) {
  const root = { v: JSON.parse(JSON.stringify(instance)) };
  const all = slots(root.v);
  const pick = (xs) => xs[Math.floor(random() * xs.length)];
  const slot = pick(all);
  const set = (x) => (slot.parent === null ? (root.v = x) : (slot.parent[slot.key] = x));
  const v = slot.value;
  const op = Math.floor(random() * 8);
  const anyValue = () => (vocab.values.length && random() < 0.4 ? pick(vocab.values) : pick(kOtherTypes));
  if (op === 0) set(anyValue());
  else if (op === 1 && Array.isArray(v)) {
    if (v.length && random() < 0.6) v.push(JSON.parse(JSON.stringify(pick(v))));
    else if (v.length) v.splice(Math.floor(random() * v.length), 1);
    else v.push(anyValue());
  } else if (op === 2 && v && typeof v === 'object' && !Array.isArray(v)) {
    const keys = Object.keys(v);
    if (keys.length && random() < 0.5) delete v[pick(keys)];
    else v[vocab.names.length && random() < 0.7 ? pick(vocab.names) : 'extra_key'] = anyValue();
  } else if (op === 3 && typeof v === 'number') {
    set(pick([v + 1, v - 1, v * 1000, -v - 1, v + 0.5, 0, 2 ** 53, -(2 ** 53)]));
  } else if (op === 4 && typeof v === 'string') {
    set(pick(['', v + '!', ' ' + v, v.toUpperCase(), v + 'x'.repeat(300), v.slice(1), '2020-13-45', 'not a uri']));
  } else if (op === 5 && slot.parent && !Array.isArray(slot.parent)) {
    delete slot.parent[slot.key];
  } else if (op === 6 && typeof v === 'boolean') set(!v);
  else set(anyValue());
  return root.v;
}

function mutants(valid, schema, count, seed) {
  const vocab = schemaVocabulary(schema);
  const random = rng(seed);
  const seen = new Set(valid.map((v) => JSON.stringify(v)));
  const out = [];
  for (let tries = 0; out.length < count && tries < count * 20; ++tries) {
    let m = valid[tries % valid.length];
    for (let n = 1 + (random() < 0.3); n > 0; --n) m = mutate(m, vocab, random);
    const text = JSON.stringify(m);
    if (text !== undefined && !seen.has(text)) seen.add(text), out.push(text);
  }
  return out;
}

function verdicts(run, request) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'grammar-exactness-'));
  try {
    fs.writeFileSync(path.join(dir, 'request.json'), JSON.stringify(request));
    run(path.join(dir, 'request.json'), path.join(dir, 'answer.json'));
    return JSON.parse(fs.readFileSync(path.join(dir, 'answer.json'), 'utf8'));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function main() {
  const [bin, tokenizerDir, schemaDir, countArg] = process.argv.slice(2);
  const count = Number(countArg || 50);
  const items = [], rows = [];
  for (const name of fs.readdirSync(schemaDir).sort()) {
    const file = JSON.parse(fs.readFileSync(path.join(schemaDir, name), 'utf8'));
    const validate = ajvValidator(file.schema);
    const row = { name, checked: validate !== null, probes: [] };
    rows.push(row);
    if (!validate) continue;
    // Each probe keeps the keyword ajv rejects it on (its first error), for the examples.
    const probe = (data) =>
      validate(data) ? null : { text: JSON.stringify(data), keyword: validate.errors[0].keyword };
    const valid = [];
    for (const t of file.tests || []) {
      const p = probe(t.data);
      p ? row.probes.push(p) : valid.push(t.data);
    }
    row.labelled = row.probes.length;
    row.positives = valid.map((v) => JSON.stringify(v));
    row.labelledValid = valid.length;
    if (valid.length) for (const t of mutants(valid, file.schema, count, 1234 + rows.length)) {
      const p = probe(JSON.parse(t));
      p ? row.probes.push(p) : row.positives.push(t);
    }
    items.push({ schema: JSON.stringify(file.schema), instances: [...row.probes.map((p) => p.text), ...row.positives] });
    row.item = items.length - 1;
  }
  const engines = {
    deepinfer: verdicts((req, ans) => {
      execFileSync(bin, [tokenizerDir, '--verdicts', req, ans], { stdio: ['ignore', 'ignore', 'inherit'] });
    }, items),
    // xgrammar's WASM prints warnings on stdout: silenced.
    'xgrammar 0.1.27': verdicts((req, ans) => {
      const oracle = path.join(__dirname, '../tests/grammar/xgrammar_oracle.cjs');
      execFileSync('node', [oracle, req, ans], { stdio: 'ignore' });
    }, { verdicts: items }).verdicts,
  };
  const checked = rows.filter((r) => r.checked);
  const sum = (f) => checked.reduce((n, r) => n + f(r), 0);
  const probes = sum((r) => r.probes.length), labelled = sum((r) => r.labelled);
  const positives = sum((r) => r.positives.length), labelledValid = sum((r) => r.labelledValid);
  console.log(`${rows.length} MaskBench schemas, ${checked.length} loadable by ajv 8.20.0; ${probes} ajv-invalid ` +
              `instances (${labelled} labelled, the rest mutants of valid ones, up to ${count} per schema) and ` +
              `${positives} ajv-valid ones (${labelledValid} labelled, the rest mutants)`);
  console.log();
  console.log('| engine | compiled | exact coverage (compiled, no probe accepted, no valid one rejected) | ' +
              'over-accepting schemas | invalid accepted | falsely rejecting schemas | valid rejected | examples |');
  console.log('|---|---|---|---|---|---|---|---|');
  const rate = (n, of) => `${n}/${of} (${(100 * n / Math.max(of, 1)).toFixed(1)} %)`;
  for (const [engine, answer] of Object.entries(engines)) {
    let compiled = 0, exact = 0, accepted = 0, invalidSeen = 0, rejected = 0, validSeen = 0, rejecting = 0;
    const over = [];
    for (const row of rows) {
      const a = row.checked ? answer[row.item] : null;
      if (!a || !a.compiled) continue;
      ++compiled;
      const bad = row.probes.filter((_, i) => a.accepted[i]);
      const refused = row.positives.filter((_, i) => !a.accepted[row.probes.length + i]);
      accepted += bad.length, invalidSeen += row.probes.length;
      rejected += refused.length, validSeen += row.positives.length;
      if (refused.length) {
        ++rejecting;
        if (process.env.EXACTNESS_VERBOSE) console.error(`${engine} rejects valid ${row.name}: ${refused[0].slice(0, 80)}`);
      }
      if (!bad.length && !refused.length) ++exact;
      if (!bad.length) continue;
      const text = `${row.name.replace(/\.json$/, '')} (\`${bad[0].keyword}\`: \`${bad[0].text.slice(0, 40)}\`)`;
      over.push({ keyword: bad[0].keyword, text });
    }
    // Examples: the first over-accepting schema of each keyword ajv rejects on.
    const byKeyword = new Map();
    for (const o of over) byKeyword.set(o.keyword, [...(byKeyword.get(o.keyword) || []), o]);
    const examples = [...byKeyword.values()].map((os) => os[0].text).slice(0, 4).join('; ').replace(/\|/g, '\\|');
    const tally = [...byKeyword].map(([k, os]) => `${k} ${os.length}`).join(', ');
    console.log(`| ${engine} | ${compiled}/${checked.length} | ${exact}/${checked.length} | ${over.length}` +
                `${tally ? ` (${tally})` : ''} | ${rate(accepted, invalidSeen)} | ${rejecting} | ` +
                `${rate(rejected, validSeen)} | ${examples} |`);
    if (process.env.EXACTNESS_VERBOSE) over.forEach((o) => console.error(`${engine} over-accepts ${o.text}`));
  }
}

main();
