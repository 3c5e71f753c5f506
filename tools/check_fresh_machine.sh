#!/usr/bin/env bash
# Proves the README's two commands on a really fresh Debian 12, without touching the host: a
# minimal bookworm (debootstrap --variant=minbase, made once into a cache folder) is copied for
# each run, this checkout's HEAD is cloned into it, and inside, as root, only `git` and `make` are
# installed before `make test` and `make run` (with one chat completion and one Anthropic message
# sent to the server by curl). Needs root on a Debian host with network access to a Debian mirror
# and the npm registry. Run it whenever dependencies, CMake files or tools/install_deps.sh change.
#
# Usage: tools/check_fresh_machine.sh [--keep]
#   --keep                 leave the run's root folder in place for inspection (it is unmounted)
#   FRESH_CACHE=DIR        where the base and the runs live (default ~/.cache/deepinfer-fresh)
#   FRESH_MIRROR=URL       Debian mirror for debootstrap (default: the host's first apt source)
#   FRESH_PORT=N           port of the `make run` server (default 18000; the chroot shares the
#                          host's network)
set -euo pipefail

keep=0
[[ "${1:-}" == "--keep" ]] && keep=1
repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${FRESH_CACHE:-$HOME/.cache/deepinfer-fresh}"
port="${FRESH_PORT:-18000}"
base="$cache/bookworm-minbase"
run_root=""
phase_log=()
phase_start=0
run_start=$(date +%s)

die() { echo "check_fresh_machine: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot and mounts)"

begin() { phase_start=$(date +%s); echo "=== $1"; }
end() { phase_log+=("$(printf '%-34s %5ds' "$1" $(($(date +%s) - phase_start)))"); }

# Every process whose root is the chroot (the server, a test's redis-server) is killed before the
# mounts go, and the mounts go before anything is deleted, on every exit path.
chroot_pids() {
  local p
  for p in /proc/[0-9]*; do
    [[ "$(readlink "$p/root" 2>/dev/null)" == "$run_root" ]] && echo "${p#/proc/}"
  done
  return 0
}

cleanup() {
  local rc=$?
  [[ -n "$run_root" && -d "$run_root" ]] || exit "$rc"
  local pid
  for pid in $(chroot_pids); do kill -9 "$pid" 2>/dev/null || true; done
  sleep 1
  local m
  for m in dev sys proc; do
    mountpoint -q "$run_root/$m" && umount -R "$run_root/$m"
  done
  if grep -q " $run_root/" /proc/mounts; then
    echo "check_fresh_machine: mounts left under $run_root; not deleting it" >&2
    rc=1
  elif ((keep)); then
    echo "kept: $run_root"
  else
    rm -rf "$run_root"
  fi
  echo
  echo "=== phase times"
  printf '%s\n' "${phase_log[@]}"
  printf '%-34s %5ds\n' total $(($(date +%s) - run_start))
  if ((rc == 0)); then echo "check_fresh_machine: PASS"; else echo "check_fresh_machine: FAIL (exit $rc)"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

host_mirror() {
  local uri
  uri=$(grep -hoE '^URIs: *\S+' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1 | awk '{print $2}')
  [[ -z "$uri" ]] && uri=$(grep -hoE '^deb +\S+' /etc/apt/sources.list 2>/dev/null | head -n1 | awk '{print $2}')
  echo "${uri:-http://deb.debian.org/debian}"
}

in_root() { chroot "$run_root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c "$1"; }

mkdir -p "$cache"
if [[ ! -f "$base/.complete" ]]; then
  begin "debootstrap (once, cached)"
  command -v debootstrap >/dev/null || {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
  }
  rm -rf "$base"
  debootstrap --variant=minbase bookworm "$base" "${FRESH_MIRROR:-$(host_mirror)}"
  touch "$base/.complete"
  end "debootstrap (once, cached)"
fi

begin "copy base"
run_root="$(mktemp -d "$cache/run.XXXXXX")"
cp -a "$base/." "$run_root/"
rm -f "$run_root/.complete"
end "copy base"

begin "mounts, sources, clone"
mount -t proc proc "$run_root/proc"
mount --rbind /sys "$run_root/sys" && mount --make-rslave "$run_root/sys"
mount --rbind /dev "$run_root/dev" && mount --make-rslave "$run_root/dev"
cp -aL /etc/resolv.conf "$run_root/etc/resolv.conf"
rm -f "$run_root/etc/apt/sources.list"
[[ -f /etc/apt/sources.list ]] && cp /etc/apt/sources.list "$run_root/etc/apt/"
mkdir -p "$run_root/etc/apt/sources.list.d"
cp /etc/apt/sources.list.d/*.sources "$run_root/etc/apt/sources.list.d/" 2>/dev/null || true
# A network that inspects TLS has its own certificate authority: the host's local ones come
# along (ca-certificates, installed with git, adds them to the system store).
mkdir -p "$run_root/usr/local/share/ca-certificates"
cp -r /usr/local/share/ca-certificates/. "$run_root/usr/local/share/ca-certificates/" 2>/dev/null || true
# Package scripts must not start services (redis-server) in the host's network namespace.
printf '#!/bin/sh\nexit 101\n' >"$run_root/usr/sbin/policy-rc.d"
chmod +x "$run_root/usr/sbin/policy-rc.d"
head="$(git -C "$repo" rev-parse HEAD)"
[[ -z "$(git -C "$repo" status --porcelain)" ]] ||
  echo "note: the checkout has uncommitted changes; only HEAD ($head) is tested"
git clone -q --no-hardlinks "$repo" "$run_root/root/deepinfer"
git -C "$run_root/root/deepinfer" checkout -q "$head"
end "mounts, sources, clone"

begin "apt-get install git make"
in_root 'export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq git make >/dev/null'
end "apt-get install git make"

begin "make test"
in_root 'cd /root/deepinfer && make test' 2>&1 | tee "$run_root/root/make_test.log"
end "make test"
summary="$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$run_root/root/make_test.log" | tail -n1)"
[[ -n "$summary" ]] || die "make test printed no CTest summary"

begin "make run + requests"
in_root "cd /root/deepinfer && PORT=$port setsid make run >/root/make_run.log 2>&1 &"
up=0
for _ in $(seq 1 300); do
  if in_root "curl -sf http://127.0.0.1:$port/health >/dev/null"; then up=1; break; fi
  sleep 1
done
((up)) || { tail -n 40 "$run_root/root/make_run.log"; die "the make run server never answered /health"; }
model="$(in_root "curl -sf http://127.0.0.1:$port/v1/models" | sed -E 's/.*"id" *: *"([^"]+)".*/\1/')"
chat="$(in_root "curl -sf http://127.0.0.1:$port/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{\"model\": \"$model\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], \"max_tokens\": 16}'")" ||
  die "chat completion failed"
echo "chat completion: $chat"
grep -q '"object" *: *"chat.completion"' <<<"$chat" || die "chat completion has no chat.completion object"
grep -q '"completion_tokens" *: *[1-9]' <<<"$chat" || die "chat completion produced no tokens"
msg="$(in_root "curl -sf http://127.0.0.1:$port/v1/messages -H 'Content-Type: application/json' \
  -H 'anthropic-version: 2023-06-01' \
  -d '{\"model\": \"$model\", \"max_tokens\": 16, \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}]}'")" ||
  die "Anthropic message failed"
echo "anthropic message: $msg"
grep -q '"type" *: *"message"' <<<"$msg" || die "Anthropic message has no message type"
grep -q '"output_tokens" *: *[1-9]' <<<"$msg" || die "Anthropic message produced no tokens"
server_pid=""
for pid in $(chroot_pids); do
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'bin/deepinfer serve' && server_pid=$pid
done
[[ -n "$server_pid" ]] || die "no deepinfer serve process found"
kill -TERM "$server_pid"
for _ in $(seq 1 30); do kill -0 "$server_pid" 2>/dev/null || break; sleep 1; done
kill -0 "$server_pid" 2>/dev/null && die "the server did not stop within 30 s of SIGTERM"
end "make run + requests"

echo
echo "make test: $summary"
