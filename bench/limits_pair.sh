#!/bin/bash
# bench/limits_pair.sh: the capped fan-out against the uncapped one, on two
# running clusters (two builds of the extension) taking turns, so that the
# load of a shared machine weighs on both alike.
#
#   bench/limits_pair.sh [--n STEPS] [--reps R] [--clients C] \
#       NAME_A HOST_A PORT_A BIN_A  NAME_B HOST_B PORT_B BIN_B
#
# Each side needs a database `exp` with the extension and bench/setup.sql.
# Repetition r runs, on A then on B: a fan-out of STEPS job steps (1 -> N ->
# 1, bench.def_fanout) without limits, then the same under concurrency_cap
# 8, each worked by C clients with bench/claim_complete.sql in pgbench
# segments of 3 s until the run ends; the rate is N over the run's span
# (finished_at - created_at).  One line per run, then per side the capped /
# uncapped ratio of each repetition and their median.
set -euo pipefail

N=3000
REPS=6
CLIENTS=8
while [ $# -gt 8 ]; do
	case "$1" in
		--n) N=$2; shift 2 ;;
		--reps) REPS=$2; shift 2 ;;
		--clients) CLIENTS=$2; shift 2 ;;
		*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
[ $# -eq 8 ] || { sed -n 2,16p "$0" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)

# one_run HOST PORT BIN KIND: steps/s of one fan-out run
one_run()
{
	local host=$1 port=$2 bin=$3 kind=$4 limits="" run status
	local psql=("$bin/psql" -X -qAt -h "$host" -p "$port" -U postgres -d exp)
	[ "$kind" = capped ] && limits="|| '{\"limits\": {\"concurrency_cap\": 8}}'::jsonb"
	run=$("${psql[@]}" -c "SELECT workflow.start_run(bench.def_fanout($N, 'exp.j') $limits)")
	while :; do
		"$bin/pgbench" -n -M simple -h "$host" -p "$port" -U postgres \
			-c "$CLIENTS" -j "$CLIENTS" -T 3 -D jt=exp.j -D idle_us=1000 \
			-f "$HERE/claim_complete.sql" exp >/dev/null 2>&1 || true
		status=$("${psql[@]}" -c "SELECT status FROM workflow.workflow_runs WHERE id = '$run'")
		[ "$status" = SUCCEEDED ] && break
		[ "$status" = RUNNING ] || { echo "run $run ended $status" >&2; exit 1; }
	done
	"${psql[@]}" -c "SELECT round($N / extract(epoch FROM finished_at - created_at)::numeric, 1)
	                   FROM workflow.workflow_runs WHERE id = '$run'"
}

declare -A ratios
for rep in $(seq 1 "$REPS"); do
	for side in A B; do
		if [ $side = A ]; then name=$1 host=$2 port=$3 bin=$4; else name=$5 host=$6 port=$7 bin=$8; fi
		plain=$(one_run "$host" "$port" "$bin" plain)
		capped=$(one_run "$host" "$port" "$bin" capped)
		ratio=$(awk -v c="$capped" -v p="$plain" 'BEGIN {printf "%.2f", c / p}')
		echo "rep $rep $name: uncapped $plain steps/s, capped $capped steps/s, ratio $ratio"
		ratios[$side]="${ratios[$side]:-} $ratio"
	done
done
for side in A B; do
	if [ $side = A ]; then name=$1; else name=$5; fi
	median=$(printf '%s\n' ${ratios[$side]} | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}')
	echo "$name: capped / uncapped per repetition:${ratios[$side]}; median $median"
done
