// Hugging Face tokenizers side of bench/bench_tokenizer.sh: encodes the same documents with the
// Rust library (npm @anush008/tokenizers, one thread per encode call) and reports the time.
// usage: node bench_tokenizer_hf.mjs TOKENIZER_JSON DOCUMENTS_JSON REPEATS
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, '..', 'tests', 'node', 'package.json'));
const { Tokenizer } = require('@anush008/tokenizers');

const [tokenizerPath, documentsPath, repeatsText] = process.argv.slice(2);
const tokenizer = Tokenizer.fromFile(tokenizerPath);
const documents = JSON.parse(readFileSync(documentsPath, 'utf8'));
const repeats = Number(repeatsText);

async function encodeAll() {
  let numTokens = 0;
  for (const text of documents) {
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: false });
    numTokens += encoding.getLength();
  }
  return numTokens;
}

await encodeAll();  // warm-up
let best = Infinity;
let numTokens = 0;
for (let r = 0; r < repeats; ++r) {
  const start = process.hrtime.bigint();
  numTokens = await encodeAll();
  best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e6);
}
const numBytes = documents.reduce((sum, text) => sum + Buffer.byteLength(text, 'utf8'), 0);
console.log(JSON.stringify({ ms: best, tokens: numTokens, bytes: numBytes }));
