#!/usr/bin/env bash
# Measures the SQLite drivers the server can be built with (docs/PERFORMANCE.md, "The
# SQLite driver"), in one sitting: for each round, each driver in turn (A B C A B C, so
# that whatever else the machine does hits them alike), a first build on empty caches
# (a fresh GOCACHE and GOMODCACHE; GOPROXY and GOFLAGS as the environment has them), in two
# timed steps under /usr/bin/time -v:
#   download: `go list -deps .`, which fetches the modules the build needs, as the first
#             `go run .` on a fresh machine does;
#   compile:  `go build -o BIN .` with the network off (GOPROXY=off), standard library
#             included, as on a fresh machine;
# each step's wall and CPU time, largest process (max RSS) and the peak of all its
# processes together (sampled every 0.5 s); then the binary's size; at the end the load
# figures of the binaries (paced and burst, scripts/loadpair.sh, ports from PORT, default
# 19080), compared with the first driver.
#
#   bash scripts/sqlite-drivers.sh OUT [BUILD_ROUNDS [LOAD_ROUNDS [DRIVER...]]]
#
# BUILD_ROUNDS defaults to 2, LOAD_ROUNDS to 3 (0 skips the load), the drivers to
# modernc ncruces mattn (mattn needs cgo and a C compiler; it is measured for reference).
# OUT gets each step's /usr/bin/time output, builds.tsv (one line per step), the binaries
# in bin/, the load runs in load/, and summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 1 ]; then
  sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
out=$1 build_rounds=${2:-2} load_rounds=${3:-3}
shift $(($# < 3 ? $# : 3))
drivers=("$@")
[ ${#drivers[@]} -gt 0 ] || drivers=(modernc ncruces mattn)
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }

mkdir -p "$out/bin"
out=$(cd "$out" && pwd)
summary=$out/summary.txt
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "go: $(go version | cut -d' ' -f3-); GOPROXY=$(go env GOPROXY) GOFLAGS=$(go env GOFLAGS)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} | tee "$summary"

# Each driver's build tag. sqlite_modernc names the default when it is modernc too.
tag() { echo "sqlite_$1"; }

# seconds turns /usr/bin/time's h:mm:ss or m:ss.ss into seconds.
seconds() { awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; printf "%.1f", s }' <<<"$1"; }

# peak PID FILE: while PID lives, every 0.5 s, the resident memory of PID and all its
# descendants together; writes the highest (KiB) to FILE.
peak() {
  local root=$1 max=0 sum
  while kill -0 "$root" 2>/dev/null; do
    sum=$(ps -e -o pid=,ppid=,rss= | awk -v root="$root" '
      { parent[$1] = $2; rss[$1] = $3 }
      END {
        for (p in parent) { q = p; while (q != root && q in parent && q > 1) q = parent[q]; if (q == root) s += rss[p] }
        print s + 0
      }')
    [ "$sum" -gt "$max" ] && max=$sum
    sleep 0.5
  done
  echo "$max" >"$2"
}

# step DRIVER ROUND NAME CMD...: runs CMD under /usr/bin/time -v and adds a line to builds.tsv.
step() {
  local d=$1 r=$2 name=$3
  shift 3
  local f="$out/$d-$r-$name.time"
  echo "round $r: $d $name (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  /usr/bin/time -v -o "$f" "$@" >"$out/$d-$r-$name.log" 2>&1 &
  local pid=$!
  peak "$pid" "$f.peak" &
  local sampler=$!
  if ! wait "$pid"; then
    echo "  failed, see $out/$d-$r-$name.log" >&2
    exit 1
  fi
  wait "$sampler"
  local wall rss user sys
  wall=$(seconds "$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$f")")
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$f")
  user=$(sed -n 's/.*User time (seconds): //p' "$f")
  sys=$(sed -n 's/.*System time (seconds): //p' "$f")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$d" "$r" "$name" "$wall" "$(awk -v a="$user" -v b="$sys" 'BEGIN { printf "%.1f", a + b }')" "$rss" "$(cat "$f.peak")" >>"$out/builds.tsv"
}

printf 'driver\tround\tstep\twall_s\tcpu_s\tmax_rss_kib\tpeak_total_kib\n' >"$out/builds.tsv"
for r in $(seq 1 "$build_rounds"); do
  for d in "${drivers[@]}"; do
    tmp=$(mktemp -d)
    export GOCACHE=$tmp/cache GOMODCACHE=$tmp/mod
    step "$d" "$r" download go list -deps -tags "$(tag "$d")" .
    step "$d" "$r" compile env GOPROXY=off go build -tags "$(tag "$d")" -o "$out/bin/$d" .
    unset GOCACHE GOMODCACHE
    chmod -R u+w "$tmp" && rm -rf "$tmp"
  done
done
for d in "${drivers[@]}"; do
  printf '%s\t-\tbinary\t-\t-\t%s\t-\n' "$d" "$(($(stat -c %s "$out/bin/$d") / 1024))" >>"$out/builds.tsv"
done

# The medians (the mean of the middle two for an even count) of each driver's steps.
{
  echo
  echo "first build on empty caches, median of $build_rounds; compile's max RSS is its largest single process"
  echo "(one package's compile), its peak the sum of all its processes, sampled every 0.5 s"
  printf '%-8s %11s %10s %8s %14s %12s %9s %11s\n' driver download_s compile_s total_s compile_cpu_s max_rss_MiB peak_MiB binary_MiB
  for d in "${drivers[@]}"; do
    awk -F'\t' -v d="$d" '
      function med(a, n,   i, j, t) {
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
      }
      $1 != d { next }
      $3 == "download" { dl[++nd] = $4; tot[$2] += $4 }
      $3 == "compile" { cw[++nc] = $4; cc[nc] = $5; tot[$2] += $4; rs[nc] = $6; pk[nc] = $7 }
      $3 == "binary" { bin = $6 }
      END {
        for (r in tot) t[++nt] = tot[r]
        printf "%-8s %11.1f %10.1f %8.1f %14.1f %12.0f %9.0f %11.1f\n", d, med(dl, nd), med(cw, nc), med(t, nt), med(cc, nc), med(rs, nc) / 1024, med(pk, nc) / 1024, bin / 1024
      }' "$out/builds.tsv"
  done
} | tee -a "$summary"

if [ "$load_rounds" -gt 0 ]; then
  pairs=()
  for d in "${drivers[@]}"; do pairs+=("$d=$out/bin/$d"); done
  PORT=${PORT:-19080} bash scripts/loadpair.sh "$out/load" "$load_rounds" paced,burst "${pairs[@]}"
  { echo; go run ./cmd/talkgraph-load -compare "$out/load" -compare-base "${drivers[0]}"; } | tee -a "$summary"
fi
echo "summary: $summary" >&2
