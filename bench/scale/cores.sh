#!/bin/sh
# cores.sh DIR OUT [RUN...]: BenchmarkScaleFromFiles on chosen CPU sets, from prebuilt binaries,
# for machines with no Go toolchain (make bench-scale builds and runs it where Go is).
#   DIR  holds scale.test (go test -c ./bench/scale/) and mcpbridge (go build ./cmd/mcpbridge),
#        each possibly gzipped (NAME.gz)
#   OUT  receives one log per run and summary.txt
#   RUN  is N:FILES:CPUS[:BIN], CPUS a taskset list or "all", BIN a bridge binary of DIR other
#        than mcpbridge (to compare builds on one machine) (default: the 1M and 100k runs below)
# FLAGS (environment) adds benchmark flags to every run, e.g. FLAGS='-scale.cpu-timeline 500ms'.
# Each run's bridge and clients share the CPU set, as on a machine of that many cores: Go sizes
# GOMAXPROCS from the affinity mask.
set -eu
dir=$1 out=$2
shift 2
[ $# -gt 0 ] || set -- 1000000:1000:all 1000000:1000:0,1 100000:100:0,1 100000:100:0 100000:100:all
for gz in "$dir"/*.gz; do
	[ -e "$gz" ] || continue
	f=${gz%.gz}
	if [ ! -x "$f" ]; then gunzip -c "$gz" >"$f" && chmod +x "$f"; fi
done
mkdir -p "$out"
echo "machine: $(nproc) CPUs, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo)" | tee "$out/summary.txt"
for run in "$@"; do
	n=${run%%:*} rest=${run#*:} files=${run#*:} files=${files%%:*} cpus=${rest#*:} bin=mcpbridge
	case "$cpus" in *:*) bin=${cpus#*:} cpus=${cpus%%:*};; esac
	i=$((${i:-0} + 1))
	log="$out/$i-scale-$n-$(echo "$cpus" | tr ',' '_')-$bin.log"
	pin=""
	[ "$cpus" = all ] || pin="taskset -c $cpus"
	echo "== $n ServiceEntries in $files files, CPUs $cpus, $bin ($(date -u +%T))" | tee -a "$out/summary.txt"
	(cd "$dir" && $pin ./scale.test -test.run '^$' -test.bench BenchmarkScaleFromFiles -test.benchtime 1x \
		-test.timeout 20m -scale.n "$n" -scale.files "$files" -scale.largest -scale.bin "./$bin" ${FLAGS:-}) >"$log" 2>&1 || echo "run failed: see $log" | tee -a "$out/summary.txt"
	grep -E '^BenchmarkScaleFromFiles|^ +[0-9.]+ ' "$log" | tee -a "$out/summary.txt" || true
done
