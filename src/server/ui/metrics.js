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

// The figures the page shows: requests running and waiting, the KV cache's use (0-1), and the
// share of prompt tokens the prefix cache served since start-up (null before any lookup).
export function summarize(samples) {
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
