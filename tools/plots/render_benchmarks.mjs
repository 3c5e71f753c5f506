// Renders the benchmark figures in docs/bench/*.json(l) as SVG charts: Vega-Lite specs compiled to
// Vega and rendered headless (no browser, no canvas: text is measured by Vega's estimate).
// Usage: node tools/plots/render_benchmarks.mjs [OUT_DIR] (default docs/bench/plots; `make plots`),
// or --check: render in memory and fail, naming them, when the committed SVGs in docs/bench/plots
// differ (the CTest `plots_current`, so a figure added to the JSON cannot leave a stale chart).
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as vega from 'vega';
import * as vegaLite from 'vega-lite';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const benchDir = path.join(root, 'docs/bench');

// One JSON object per line (.jsonl) or one object (.json).
function records(file) {
  const text = readFileSync(path.join(benchDir, file), 'utf8');
  if (file.endsWith('.json')) return [JSON.parse(text)];
  return text.split('\n').filter((line) => line.trim()).map((line, i) => {
    try {
      return JSON.parse(line);
    } catch (error) {
      throw new Error(`${file}:${i + 1}: ${error.message}`);
    }
  });
}

const contextLabel = (context) => (context >= 1024 ? `${context / 1024}K` : String(context));

// Decode tokens/s against batch on the H200, Llama-3-8B shape: ours at two contexts, each beside
// its copy roofline (a step can go no faster than moving the weights and the batch's KV once at the
// measured copy rate), and llama.cpp's CUDA build on the same weights.
function decodeVsBatch() {
  const rows = [];
  const ours = records('cuda_dense_2026-12-02.jsonl').filter((r) => r.kind === 'decode' && r.config === 'llama3-8b');
  for (const r of ours) {
    const context = contextLabel(r.context);
    rows.push({ batch: r.batch, tok_s: r.tok_s, series: `deepinfer, ctx ${context} (2026-12-02)`, line: 'measured' });
    const ceiling = (r.batch * r.copy_peak_tb_s * 1000) / (r.weight_gb + r.kv_gb);
    rows.push({ batch: r.batch, tok_s: ceiling, series: `copy roofline, ctx ${context}`, line: 'ceiling' });
  }
  for (const r of records('llama_cpp_cuda_2026-11-30.jsonl').filter((r) => r.kind === 'decode' && r.engine === 'llama.cpp')) {
    rows.push({ batch: r.batch, tok_s: r.tok_s, series: 'llama.cpp 80fb11a CUDA, ctx ~1K (2026-11-30)', line: 'measured' });
  }
  return {
    file: 'decode_vs_batch.svg',
    spec: lineChart(rows, {
      title: 'Decode on one H200, Llama-3-8B shape (bf16)',
      x: { field: 'batch', title: 'batch (sequences per step)' },
      y: { field: 'tok_s', title: 'tokens/s' },
      // A context's roofline in its measured line's colour.
      colors: {
        'deepinfer, ctx 1K (2026-12-02)': blue, 'deepinfer, ctx 8K (2026-12-02)': orange,
        'llama.cpp 80fb11a CUDA, ctx ~1K (2026-11-30)': green,
        'copy roofline, ctx 1K': blue, 'copy roofline, ctx 8K': orange,
      },
    }),
  };
}

// Prefill tokens/s against prompt length on the H200: ours beside the GEMM ceiling (the same
// floating-point work at the measured bf16 matmul rate) and llama.cpp at 4K.
function prefillVsLength() {
  const rows = [];
  const ours = records('cuda_dense_2026-12-02.jsonl').filter((r) => r.kind === 'prefill' && r.config === 'llama3-8b');
  for (const r of ours) {
    rows.push({ tokens: r.tokens, tok_s: r.tok_s, series: 'deepinfer (2026-12-02)', line: 'measured' });
    rows.push({ tokens: r.tokens, tok_s: (r.tok_s * r.matmul_peak_tflop_s) / r.tflop_s, series: 'GEMM ceiling', line: 'ceiling' });
  }
  for (const r of records('llama_cpp_cuda_2026-11-30.jsonl').filter((r) => r.kind === 'prefill' && r.engine === 'llama.cpp')) {
    rows.push({ tokens: r.tokens, tok_s: r.tok_s, series: 'llama.cpp 80fb11a CUDA (2026-11-30)', line: 'measured' });
  }
  return {
    file: 'prefill_vs_length.svg',
    spec: lineChart(rows, {
      title: 'Prefill on one H200, Llama-3-8B shape (bf16)',
      x: { field: 'tokens', title: 'prompt tokens' },
      y: { field: 'tok_s', title: 'tokens/s' },
      colors: { 'deepinfer (2026-12-02)': blue, 'llama.cpp 80fb11a CUDA (2026-11-30)': green, 'GEMM ceiling': blue },
    }),
  };
}

// The HTTP server under load (deepinfer bench serve --json, streaming /v1/completions): time to
// first token and inter-token latency percentiles against concurrency. The run charted is the
// CPU one of the development VM (tools/gpu/bench_serve.sh makes the H200's; none is in docs/bench
// yet); its label names the machine and model.
function serveLatency() {
  const file = 'serve_cpu_2026-12-03.jsonl';
  const rows = [];
  for (const r of records(file).filter((r) => r.kind === 'serve')) {
    for (const [figure, panel] of [['ttft_ms', 'time to first token (ms)'], ['itl_ms', 'inter-token latency (ms)']]) {
      for (const p of ['p50', 'p90', 'p99']) rows.push({ concurrency: r.concurrency, ms: r[figure][p], series: p, line: 'measured', panel });
    }
  }
  const shape = records(file)[0];
  return {
    file: 'serve_latency_vs_concurrency.svg',
    spec: lineChart(rows, {
      title: [`deepinfer serve under load: ${shape.input_tokens} tokens in, ${shape.output_tokens} out, streamed`, shape.label.replace(/, commit .*/, '')],
      x: { field: 'concurrency', title: 'requests in flight', axis: { values: [...new Set(rows.map((r) => r.concurrency))] } },
      y: { field: 'ms', title: 'ms' },
      colors: { p50: blue, p90: green, p99: orange },
      column: { field: 'panel', title: null, sort: ['time to first token (ms)', 'inter-token latency (ms)'] },
      independentY: true,
      format: ',.1f',
    }),
  };
}

// The load-balancing simulator (deepinfer lb-sim) on the two Mooncake traces at 8, 64 and 512
// prefill instances (half as many decode ones), the arrival rate scaled with the instances so each
// sees the same load: one point per policy and size, for the given figure of its results.
function lbSimRows(figure, scale = 1) {
  const runs = records('lb_sim_2026-12-03.jsonl').filter((r) => r.config.shared_store);
  const rows = [];
  for (const run of runs) {
    // The scaling runs are each (trace, size)'s lowest rate; higher ones are the over-capacity runs.
    const lowest = Math.min(...runs.filter((r) => r.trace === run.trace && r.config.prefill_instances === run.config.prefill_instances)
      .map((r) => r.config.rate_scale));
    if (run.config.rate_scale !== lowest) continue;
    const trace = run.trace.replace('_trace.jsonl', '');
    for (const result of run.results) {
      rows.push({ instances: run.config.prefill_instances, value: result[figure] * scale, series: result.policy, line: 'measured',
                  trace: `${trace} trace` });
    }
  }
  return rows;
}

const policyColors = () => ({ seeds: blue, 'least-loaded': green, 'prefix-affinity': purple, 'round-robin': orange });

function lbSimTtft() {
  return {
    file: 'lb_sim_ttft_p99.svg',
    spec: lineChart(lbSimRows('ttft_p99_ms', 1e-3), {
      title: 'Simulated cluster: TTFT p99 by policy (deepinfer lb-sim, 2026-12-03)',
      x: { field: 'instances', title: 'prefill instances', axis: { values: [8, 64, 512] } },
      y: { field: 'value', title: 'TTFT p99 (s)' },
      colors: policyColors(),
      column: { field: 'trace', title: null },
      format: ',.1f',
    }),
  };
}

function lbSimBalance() {
  return {
    file: 'lb_sim_balanced_fraction.svg',
    spec: lineChart(lbSimRows('balanced_fraction'), {
      title: 'Simulated cluster: fraction of perfectly balanced prefill throughput',
      x: { field: 'instances', title: 'prefill instances', axis: { values: [8, 64, 512] } },
      y: { field: 'value', title: 'balanced fraction' },
      yScale: { type: 'linear', domain: [0.6, 1] },
      colors: policyColors(),
      column: { field: 'trace', title: null },
      format: '.3f',
    }),
  };
}

const blue = '#2f6fce';
const orange = '#e0801f';
const green = '#2e9e44';
const purple = '#8a4fbf';

// Lines with points, log-scaled x and y unless yScale says otherwise; colors maps each series (in
// legend order) to its colour; ceilings dashed; column, when given, draws one panel per value of
// that field side by side (independentY: each panel its own y scale); format is the tooltip's
// number format.
function lineChart(values, { title, x, y, colors, yScale = { type: 'log' }, column, format = ',.0f', independentY = false }) {
  const width = column ? 300 : 520;
  const encoding = {
    x: { ...x, type: 'quantitative', scale: { type: 'log', nice: false, padding: 12 }, axis: { grid: true, ...x.axis } },
    y: { ...y, type: 'quantitative', scale: { nice: false, padding: 12, ...yScale }, axis: { grid: true } },
    color: {
      field: 'series', type: 'nominal', title: null,
      scale: { domain: Object.keys(colors), range: Object.values(colors) },
      legend: { orient: 'bottom', columns: 1, labelLimit: 400 },
    },
    strokeDash: { field: 'line', type: 'nominal', title: null, scale: { domain: ['measured', 'ceiling'], range: [[1, 0], [6, 4]] }, legend: null },
    tooltip: [{ field: 'series' }, { field: x.field }, { field: y.field, format }],
  };
  const layout = column
    ? { facet: { column: { type: 'nominal', ...column } },
        spec: { width, height: 300, mark: { type: 'line', point: true }, encoding },
        ...(independentY ? { resolve: { scale: { y: 'independent' } } } : {}) }
    : { width, height: 320, mark: { type: 'line', point: true }, encoding };
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title,
    background: 'white',
    data: { values },
    ...layout,
    config: { font: 'DejaVu Sans, sans-serif' },
  };
}

async function render(spec) {
  const view = new vega.View(vega.parse(vegaLite.compile(spec).spec), { renderer: 'none' });
  const svg = await view.toSVG();
  view.finalize();
  return svg;
}

const charts = [decodeVsBatch(), prefillVsLength(), serveLatency(), lbSimTtft(), lbSimBalance()];
const committedDir = path.join(benchDir, 'plots');
if (process.argv[2] === '--check') {
  const stale = [];
  for (const chart of charts) {
    const committed = path.join(committedDir, chart.file);
    if (!existsSync(committed) || readFileSync(committed, 'utf8') !== `${await render(chart.spec)}\n`) stale.push(chart.file);
  }
  if (stale.length) {
    console.error(`docs/bench/plots: ${stale.join(', ')} differ from docs/bench's figures; run make plots and commit them`);
    process.exit(1);
  }
  console.log(`docs/bench/plots: ${charts.length} charts current`);
} else {
  const outDir = path.resolve(process.argv[2] ?? committedDir);
  mkdirSync(outDir, { recursive: true });
  for (const chart of charts) {
    const out = path.join(outDir, chart.file);
    writeFileSync(out, `${await render(chart.spec)}\n`);
    console.log(`wrote ${path.relative(process.cwd(), out)}`);
  }
}
