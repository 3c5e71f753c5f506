#!/usr/bin/env bash
# A serving cluster on loopback: redis-server (the worker registry), `deepinfer router` on
# 127.0.0.1:${PORT:-8000} and its workers (`deepinfer serve --register`) on the embedded default
# model; prints the router's URL and stops everything on Ctrl-C (docs/cluster.md). By default one
# prefill and one decode worker (prefill/decode disaggregation, the KV pushed over TCP); --workers N
# starts N workers of role both instead, which run whole requests; --encoders E adds E image
# encoders (`serve --role encoder`, for a multimodal --model: docs/images.md).
#   tools/run_cluster.sh [--prefill N] [--decode M] [--kv-transfer push|store] | [--workers N] [--encoders E]
#                        [--policy seeds|round-robin|least-loaded|prefix-affinity]
#                        [--cli build/bin/deepinfer] [--model DIR] [-- extra flags for every worker]
# --kv-transfer store: the KV goes through the persistent KV store, on a directory every worker shares.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cli="$root/build/bin/deepinfer"
model="$root/models/default"
workers=0
encoders=0
prefill=1
decode=1
kv_transfer=push
policy=seeds
port="${PORT:-8000}"
worker_flags=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --workers) workers="$2"; shift 2 ;;
    --encoders) encoders="$2"; shift 2 ;;
    --prefill) prefill="$2"; shift 2 ;;
    --decode) decode="$2"; shift 2 ;;
    --kv-transfer) kv_transfer="$2"; shift 2 ;;
    --policy) policy="$2"; shift 2 ;;
    --cli) cli="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --) shift; worker_flags=("$@"); break ;;
    *) echo "run_cluster.sh: unknown flag '$1' (see the comment at the top of the script)" >&2; exit 2 ;;
  esac
done
for count in "$workers" "$prefill" "$decode" "$encoders"; do
  [[ "$count" =~ ^[0-9]+$ ]] || { echo "run_cluster.sh: --workers, --prefill, --decode and --encoders take a number" >&2; exit 2; }
done
[[ "$kv_transfer" == push || "$kv_transfer" == store ]] || { echo "run_cluster.sh: --kv-transfer is push or store" >&2; exit 2; }
# role:count of the workers to start
if ((workers > 0)); then
  roles=(); for ((w = 0; w < workers; w++)); do roles+=(both); done
else
  ((prefill > 0 && decode > 0)) || { echo "run_cluster.sh: --prefill and --decode must be >= 1" >&2; exit 2; }
  roles=(); for ((w = 0; w < prefill; w++)); do roles+=(prefill); done
  for ((w = 0; w < decode; w++)); do roles+=(decode); done
fi
for ((w = 0; w < encoders; w++)); do roles+=(encoder); done
[[ -x "$cli" ]] || { echo "run_cluster.sh: $cli not found; run 'make build' first" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "run_cluster.sh: redis-server not found; run 'make deps'" >&2; exit 1; }

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
logs="$(mktemp -d "${TMPDIR:-/tmp}/deepinfer-cluster.XXXXXX")"
pids=()
stopping=
stop() {
  trap - INT TERM EXIT
  stopping=1
  echo "stopping the cluster (logs in $logs)" >&2
  # Router first (no new requests), then the workers (they deregister), then Redis.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[$i]}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop INT TERM EXIT

# Waits until a process printed "listening on http://..." in its log, or exited.
wait_listening() {
  local pid="$1" log="$2"
  for _ in $(seq 1 600); do
    grep -q "listening on http://" "$log" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { echo "run_cluster.sh: it exited; its log ($log):" >&2; cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  echo "run_cluster.sh: not listening after 60 s; its log ($log):" >&2; cat "$log" >&2; exit 1
}

redis_port="$(free_port)"
redis_url="redis://127.0.0.1:$redis_port"
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --logfile "$logs/redis.log" &
redis_pid=$!
for _ in $(seq 1 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$redis_port") 2>/dev/null && break
  sleep 0.1
done
# Redis stops last: it is first in pids, which stop() walks backwards.
pids=("$redis_pid")
store_flags=()
[[ "$kv_transfer" == store ]] && store_flags=(--kv-cache-dir "$logs/kv-store")
for ((w = 0; w < ${#roles[@]}; w++)); do
  role_flags=("${store_flags[@]}")
  [[ "${roles[$w]}" == encoder ]] && role_flags=()  # an encoder has no KV store
  "$cli" serve --model "$model" --port 0 --register "$redis_url" --role "${roles[$w]}" "${role_flags[@]}" \
    "${worker_flags[@]}" >"$logs/worker$w-${roles[$w]}.log" 2>&1 &
  pids+=($!)
done
for ((w = 0; w < ${#roles[@]}; w++)); do wait_listening "${pids[$((w + 1))]}" "$logs/worker$w-${roles[$w]}.log"; done
"$cli" router --redis "$redis_url" --model "$model" --port "$port" --policy "$policy" --kv-transfer "$kv_transfer" \
  >"$logs/router.log" 2>&1 &
pids+=($!)
wait_listening "$!" "$logs/router.log"
name="$(basename "$(readlink -f "$model")")"
cat <<MSG
deepinfer cluster: router on http://127.0.0.1:$port (workers: ${roles[*]}; KV transfer $kv_transfer; policy $policy; registry $redis_url)
Logs: $logs. Ctrl-C stops everything. Try, from another shell:
  curl http://127.0.0.1:$port/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "$name", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16, "stream": true}'
  curl -s http://127.0.0.1:$port/metrics | grep -E 'deepinfer_(router|worker)_'
MSG
# Runs until Ctrl-C, or until any of the processes ends (then the rest are stopped too).
wait -n "${pids[@]}" || true
[[ -n "$stopping" ]] || echo "run_cluster.sh: a process of the cluster ended; see $logs" >&2
