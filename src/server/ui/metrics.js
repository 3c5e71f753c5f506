// The server's live figures, read from its Prometheus /metrics (which needs no API key).

// Prometheus text format -> {"name{labels}": value}; comments and blank lines skipped.
export function parsePrometheus(text) {
  const samples = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    if (space > 0) samples[line.slice(0, space)] = Number(line.slice(space + 1));
  }
  return samples;
}

// The sum of a per-worker family's samples ("name{worker=...}"), and how many there are.
function perWorker(samples, name) {
  const values = Object.entries(samples).filter(([key]) => key.startsWith(`${name}{`)).map(([, value]) => value);
  return { sum: values.reduce((a, b) => a + b, 0), count: values.length };
}

// The figures the page shows: requests running and waiting, the KV cache's use (0-1), and the
// share of prompt tokens the prefix cache served since start-up (null before any lookup). A router
// (deepinfer router) has no engine of its own: its figures are its workers' last reports, summed
// (held requests count as waiting), the KV use their mean, the hit rate their cached tokens over
// the prompt tokens the router sent.
export function summarize(samples) {
  if (samples['deepinfer_router_workers{state="registered"}'] !== undefined) {
    const kv = perWorker(samples, 'deepinfer_worker_reported_kv_usage_ratio');
    const prompt = samples.deepinfer_prompt_tokens_total ?? 0;
    return {
      running: perWorker(samples, 'deepinfer_worker_reported_running_requests').sum,
      waiting: perWorker(samples, 'deepinfer_worker_reported_waiting_requests').sum + (samples.deepinfer_router_held_requests ?? 0),
      kvUsage: kv.count > 0 ? kv.sum / kv.count : undefined,
      prefixHitRate: prompt > 0 ? Math.min(1, perWorker(samples, 'deepinfer_worker_reported_cached_tokens_total').sum / prompt) : null,
    };
  }
  const queried = samples.deepinfer_prefix_cache_queries_tokens_total ?? 0;
  const hits = samples.deepinfer_prefix_cache_hits_tokens_total ?? 0;
  return {
    running: samples.deepinfer_num_requests_running,
    waiting: samples.deepinfer_num_requests_waiting,
    kvUsage: samples.deepinfer_kv_cache_usage_ratio,
    prefixHitRate: queried > 0 ? hits / queried : null,
  };
}

// Calls show(summary) now and every intervalMs, and showError(error) when a poll fails (the
// server is down or restarting): polling goes on, so the figures come back with the server.
export function pollMetrics(api, show, showError, intervalMs = 2000) {
  const poll = async () => {
    try {
      show(summarize(parsePrometheus(await api.metricsText())));
    } catch (error) {
      showError(error);
    }
    setTimeout(poll, intervalMs);
  };
  poll();
}
