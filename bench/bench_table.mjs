// Prints make bench's side-by-side table (markdown) from `deepinfer bench`'s JSON line and
// llama-bench's `-o json` output. Both sides report the best of their repeats.
// Usage: node bench/bench_table.mjs DEEPINFER.json LLAMA_BENCH.json "llama.cpp LABEL"
import { readFileSync } from "node:fs";

const [deepinferPath, llamaPath, llamaLabel = "llama.cpp"] = process.argv.slice(2);
if (!llamaPath) {
  console.error("usage: node bench/bench_table.mjs DEEPINFER.json LLAMA_BENCH.json [LABEL]");
  process.exit(2);
}

const ours = JSON.parse(readFileSync(deepinferPath, "utf8").trim());
const runs = JSON.parse(readFileSync(llamaPath, "utf8"));
const depthOf = (r) => r.n_depth ?? 0;
const prefillRun = runs.find((r) => r.n_prompt > 0 && r.n_gen === 0 && depthOf(r) === 0);
const decodeRun = runs.find((r) => r.n_gen > 0 && r.n_prompt === 0 && depthOf(r) === 0);
// Decode after as many cached tokens as deepinfer's prompt (llama-bench -d), when run.
const deepDecodeRun = runs.find((r) => r.n_gen > 0 && r.n_prompt === 0 && depthOf(r) === ours.prefill_tokens);
if (!prefillRun || !decodeRun) {
  console.error(`${llamaPath}: expected one prompt-only and one generation-only llama-bench test`);
  process.exit(1);
}
const best = (run) => Math.max(...run.samples_ts);

// Decode reads every weight once per token, so bytes/token * tokens/s is the achieved bandwidth.
const theirs = {
  prefill_tok_s: best(prefillRun),
  decode_tok_s: best(decodeRun),
};
theirs.decode_gb_s = (ours.weight_bytes_per_token * theirs.decode_tok_s) / 1e9;
theirs.decode_bandwidth_ratio = theirs.decode_gb_s / ours.memory_read_gb_s;

const fmt = (value, digits) => value.toFixed(digits);
const ratio = (a, b) => `${fmt(a / b, 2)}x`;
const rows = [
  ["metric", "deepinfer", llamaLabel, "deepinfer / llama.cpp"],
  [`prefill tok/s (${ours.prefill_tokens} tokens)`, fmt(ours.prefill_tok_s, 1), fmt(theirs.prefill_tok_s, 1),
   ratio(ours.prefill_tok_s, theirs.prefill_tok_s)],
  [`decode tok/s (${ours.decode_tokens} tokens; llama.cpp from an empty cache)`, fmt(ours.decode_tok_s, 2), fmt(theirs.decode_tok_s, 2),
   ratio(ours.decode_tok_s, theirs.decode_tok_s)],
  ...(deepDecodeRun ? [[`decode tok/s, both after ${ours.prefill_tokens} cached tokens`, fmt(ours.decode_tok_s, 2),
    fmt(best(deepDecodeRun), 2), ratio(ours.decode_tok_s, best(deepDecodeRun))]] : []),
  ["decode weight reads GB/s", fmt(ours.decode_gb_s, 2), fmt(theirs.decode_gb_s, 2),
   ratio(ours.decode_gb_s, theirs.decode_gb_s)],
  ["decode bandwidth / memory read bandwidth", `${fmt(100 * ours.decode_bandwidth_ratio, 1)}%`,
   `${fmt(100 * theirs.decode_bandwidth_ratio, 1)}%`, ""],
];
const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
const line = (r) => `| ${r.map((cell, c) => cell.padEnd(widths[c])).join(" | ")} |`;
console.log(line(rows[0]));
console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
for (const r of rows.slice(1)) console.log(line(r));
console.log();
console.log(`memory read bandwidth (measured in the same run): ${fmt(ours.memory_read_gb_s, 2)} GB/s; ` +
            `weights read per decode token: ${fmt(ours.weight_bytes_per_token / 1e9, 3)} GB; ` +
            `threads: deepinfer ${ours.threads}, llama.cpp ${prefillRun.n_threads}; ` +
            `llama.cpp backend: ${prefillRun.backends ?? "CPU"}, type ${prefillRun.model_type ?? "?"}`);
