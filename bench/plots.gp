# bench/plots.gp: the two plots of a benchmark run.
#   gnuplot -e "dir='bench/results/full'" bench/plots.gp
# reads event_cost.dat and throughput_clients.dat (bench/report.py) and
# writes event_cost.png and throughput_clients.png into the same directory.
# skip_event=1 / skip_clients=1 leave out a plot whose data is missing.

if (!exists("dir")) dir = "."
set terminal pngcairo size 1000,620 enhanced font "DejaVu Sans,11"
set grid
set key top left box opaque

if (!exists("skip_event")) {
set output dir."/event_cost.png"
set title "Per-event cost against run size (1 client: claim + complete\\_job, autocommit)"
set logscale x 10
set xlabel "steps in the run"
set ylabel "ms per event (median; bars: min-max)"
set yrange [0:*]
set xrange [*:*]
set offsets graph 0.05, graph 0.05, 0, 0
plot dir."/event_cost.dat" using 1:2:3:4 with yerrorlines lw 2 pt 7 title "never-analyzed tables", \
     ""                      using 1:5:6:7 with yerrorlines lw 2 pt 5 title "after ANALYZE with one giant run", \
     ""                      using 1:8:9:10 with yerrorlines lw 2 pt 9 title "steady state"
}

if (!exists("skip_clients")) {
set output dir."/throughput_clients.png"
set title "Throughput against client count"
set logscale x 2
set xlabel "clients"
set ylabel "transactions or jobs per second (median; bars: min-max)"
set yrange [0:*]
plot dir."/throughput_clients.dat" using 1:2:3:4 with yerrorlines lw 2 pt 7 title "pgbench -N (tps)", \
     ""                            using 1:5:6:7 with yerrorlines lw 2 pt 5 title "plain jobs claim + complete\\_job (jobs/s)", \
     ""                            using 1:8 with lines dt 2 lw 2 title "target: 0.60 x pgbench -N"
}
