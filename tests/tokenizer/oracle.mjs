// Hugging Face tokenizers oracle for deepinfer's tokenizer tests: runs the real Rust library
// (npm @anush008/tokenizers) on a request file and writes the answers as JSON.
// usage: node oracle.mjs REQUEST.json ANSWER.json
// request: {"tokenizer": PATH | "tokenizer_json": TEXT,
//           "encode": [text...],                    -> "encode": ids (add_special_tokens=false)
//           "encode_plain": [text...],              -> ids with every added token unmatched
//           "encode_post": [text...],               -> ids with add_special_tokens=true
//           "decode": [[ids...]...]}                -> "decode": text, "decode_skip": text
import { createRequire } from 'node:module';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, '..', 'node', 'package.json'));
const { Tokenizer } = require('@anush008/tokenizers');

const request = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const json = request.tokenizer_json ?? readFileSync(request.tokenizer, 'utf8');
const tokenizer = Tokenizer.fromString(json);

// The same tokenizer with no added tokens: what encoding every literal as plain text gives.
function withoutAddedTokens() {
  const parsed = JSON.parse(json);
  parsed.added_tokens = [];
  return Tokenizer.fromString(JSON.stringify(parsed));
}

async function encodeAll(tok, texts, addSpecialTokens) {
  const out = [];
  for (const text of texts) {
    const encoding = await tok.encode(text, null, { addSpecialTokens });
    out.push(encoding.getIds());
  }
  return out;
}

const answer = {};
if (request.encode) answer.encode = await encodeAll(tokenizer, request.encode, false);
if (request.encode_post) answer.encode_post = await encodeAll(tokenizer, request.encode_post, true);
if (request.encode_plain) answer.encode_plain = await encodeAll(withoutAddedTokens(), request.encode_plain, false);
if (request.decode) {
  answer.decode = [];
  answer.decode_skip = [];
  for (const ids of request.decode) {
    answer.decode.push(await tokenizer.decode(ids, false));
    answer.decode_skip.push(await tokenizer.decode(ids, true));
  }
}
writeFileSync(process.argv[3], JSON.stringify(answer));
