// Checks deepinfer-hf-to-gguf against llama.cpp itself: llama.cpp (through node-llama-cpp) runs the
// GGUF file, deepinfer runs the Hugging Face directory, and every position's top logprobs must
// agree. Use a small f32 model (deepinfer-make-random-model --dtype f32); llama.cpp keeps its KV
// cache in f16, hence the 2e-3 tolerance. Exits 1 on a mismatch.
// Usage (after `npm ci --omit=optional` in bench/node, whose install script builds
// node-llama-cpp's addon): node bench/node/check_gguf.mjs DEEPINFER_CLI MODEL_DIR FILE.gguf
import { execFileSync } from "node:child_process";
import { getLlama } from "node-llama-cpp";

const kTolerance = 2e-3;
const kTokens = [5, 17, 250, 3, 99, 42, 7, 1, 64, 128];

const [cli, modelDir, ggufPath] = process.argv.slice(2);
if (!ggufPath) {
  console.error("usage: node bench/node/check_gguf.mjs DEEPINFER_CLI MODEL_DIR FILE.gguf");
  process.exit(2);
}

const scored = execFileSync(cli, ["score", "--model", modelDir, "--tokens", kTokens.join(","), "--top-logprobs", "8"],
                            { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
const ours = scored.trim().split("\n").map((line) => JSON.parse(line));

const llama = await getLlama({ gpu: false, logLevel: "error" });
const model = await llama.loadModel({ modelPath: ggufPath });
const context = await model.createContext({ contextSize: 64, batchSize: 64 });
// Plain softmax of the logits: no sampling filter may reshape the distribution.
const next = { probabilities: true, options: { temperature: 1, topK: 0, topP: 1, minP: 0 } };
const theirs = await context.getSequence().controlledEvaluate(kTokens.map((t) => [t, { generateNext: next }]));

let maxError = 0;
let topMismatches = 0;
for (let pos = 0; pos < kTokens.length; pos++) {
  const probabilities = theirs[pos].next.probabilities;
  for (const [token, logprob] of ours[pos].top) {
    maxError = Math.max(maxError, Math.abs(Math.log(probabilities.get(token)) - logprob));
  }
  const [theirTop] = probabilities.keys();
  if (theirTop !== ours[pos].top[0][0]) topMismatches++;
}
console.log(`${modelDir}: max |logprob difference| ${maxError.toExponential(2)} over ${kTokens.length} positions, ` +
            `${topMismatches} top-1 mismatches`);
process.exit(maxError <= kTolerance && topMismatches === 0 ? 0 : 1);
