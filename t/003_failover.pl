# Failover to a synchronous streaming replica under load.
#
# The primary has synchronous_standby_names naming the standby, so a commit
# returns only once the standby has flushed its WAL.  Before the failover,
# the hot standby answers the read-only API (verify(), the tables) and
# refuses claim, complete_job, heartbeat, start_run and enqueue with a
# read-only error.  Then
# four workers claim and complete jobs on the primary, logging every
# acknowledged completion; the primary is crashed (immediate stop) in the
# middle; the standby is promoted; every acknowledged completion is on it;
# the workers reconnect to it and finish every run, reaping the leases held
# at the crash.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use WorkflowTest;

my $RUNS = 8;
my @WIDTHS = (2, 8, 4, 10, 6, 1);    # 31 steps per run
my $JOBS = 0;
$JOBS += $_ for @WIDTHS;
$JOBS *= $RUNS;
my $ACKS_BEFORE_CRASH = int($JOBS / 3);

# allows_streaming sets max_connections = 10 and shared_buffers = 1MB;
# the workers and the checks need a little more.
my $more = "max_connections = 30\nshared_buffers = 16MB\n";
my $primary = new_workflow_node('primary',
	init => { allows_streaming => 1 },
	conf => $more);
$primary->backup('base');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;

# synchronous replication to the standby (primary_conninfo names it in
# application_name)
$primary->append_conf('postgresql.conf',
	"synchronous_standby_names = 'standby'\n");
$primary->reload;
ok( $primary->poll_query_until(
		'postgres',
		"SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'",
		'sync'),
	'the standby is a synchronous standby');

for my $r (1 .. $RUNS)
{
	my $def = layered_definition("load-$r", $r, @WIDTHS);
	$primary->safe_psql('postgres', "SELECT workflow.start_run('$def')");
}

# a lease that will be held at the crash: its worker goes down with the
# primary and never comes back
my $lost_def = json_text(
	{
		name => 'lost',
		steps => [
			{ key => 'r', job_type => 'tap.lost', timeout_seconds => 6 },
			{ key => 'after', job_type => 'tap.after', depends_on => ['r'] }
		]
	});
$primary->safe_psql('postgres', "SELECT workflow.start_run('$lost_def')");
$RUNS++;
$JOBS += 2;
my ($lost, $lost_token) = split /\|/, $primary->safe_psql('postgres',
	"SELECT id, lease_token FROM workflow.claim('lost-worker', ARRAY['tap.lost'])"
);
ok($lost, 'a worker that will not come back holds a lease');

# ---- the hot standby: read-only API works, writes are refused -------------

# synchronous commit: everything acknowledged so far is on the standby
$primary->wait_for_catchup($standby, 'replay');
is( $standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'the standby is in recovery');
is( $standby->safe_psql(
		'postgres',
		"SELECT count(*) || ' ' || count(*) FILTER (WHERE status = 'RUNNING') FROM workflow.workflow_runs"),
	"$RUNS $RUNS",
	'the standby reads the runs');
is( $standby->safe_psql(
		'postgres', q{
SELECT count(*) FILTER (WHERE status = 'QUEUED') || ' '
       || count(*) FILTER (WHERE status = 'RUNNING')
  FROM workflow.job_queue}),
	($RUNS - 1) * $WIDTHS[0] . ' 1',
	'the standby reads the job queue');
is( $standby->safe_psql(
		'postgres',
		'SELECT * FROM workflow.verify()'),
	'', 'verify() runs on the hot standby and finds nothing');
verify_is_clean($standby, 'hot standby before the failover');

for my $call (
	[ 'claim', "SELECT * FROM workflow.claim('standby-worker')" ],
	[
		'complete_job',
		"SELECT workflow.complete_job('$lost', '$lost_token', '{}')"
	],
	[ 'heartbeat', "SELECT workflow.heartbeat('$lost', '$lost_token')" ],
	[ 'start_run', "SELECT workflow.start_run('$lost_def')" ],
	[ 'enqueue', "SELECT workflow.enqueue('tap.plain')" ])
{
	my ($name, $sql) = @$call;
	my ($rc, $out, $err) = $standby->psql('postgres', $sql);
	ok($rc != 0 && $out eq '' && $err =~ /read-only transaction/,
		"$name fails on the hot standby with a read-only error")
	  or diag("rc=$rc out=$out err=$err");
	note("$name on the standby: " . (split /\n/, $err)[0]);
}
is( $standby->safe_psql(
		'postgres',
		"SELECT count(*) FROM workflow.job_queue WHERE status = 'RUNNING'"),
	'1',
	'the refused claim left nothing behind');

# ---- load on the primary, then the crash ----------------------------------

my $ack_log = PostgreSQL::Test::Utils::tempdir() . '/acks.log';
my $workers = WorkflowTest::Workers->new(
	node => $primary,
	workers => 4,
	log => $ack_log);

ok( $workers->run_until(
		sub { keys %{ $workers->acked } >= $ACKS_BEFORE_CRASH },
		120, "$ACKS_BEFORE_CRASH acknowledged completions"),
	"workers acknowledged $ACKS_BEFORE_CRASH completions on the primary");
my $in_flight = $workers->in_flight;
$primary->stop('immediate');
note("primary crashed with $in_flight worker commands in flight");

$workers->paused(1);
ok($workers->run_until(sub { $workers->n_up == 0 }, 60, 'workers to lose their sessions'),
	'every worker session ended with the primary');
my %acked = %{ $workers->acked };
cmp_ok(scalar keys %acked, '<', $JOBS, 'the crash came before the end of the load');

# ---- failover --------------------------------------------------------------

my $log_offset = -s $standby->logfile;
$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'the standby is promoted');
like(slurp_file($standby->logfile, $log_offset),
	qr/received promote request.*selected new timeline ID/s,
	'the standby ended recovery on a new timeline');


acked_are_present($standby, 'new primary, before the workers reconnect', \%acked);
is( $standby->safe_psql(
		'postgres',
		"SELECT status || ' ' || worker_id FROM workflow.job_queue WHERE id = '$lost'"),
	'RUNNING lost-worker',
	'new primary: the lease held at the crash is still held');
verify_is_clean($standby, 'new primary after the failover');

# ---- the workers reconnect to the new primary ------------------------------

my $last_check = 0;
my $finished = sub {
	return 0 if time - $last_check < 0.5;
	$last_check = time;
	return $standby->safe_psql('postgres',
		"SELECT count(*) FROM workflow.workflow_runs WHERE finished_at IS NOT NULL"
	) == $RUNS;
};
$workers->set_node($standby);
$workers->paused(0);
ok($workers->run_until($finished, 180, 'every run to finish'),
	'every run finishes on the new primary');
$workers->stop;

note("worker errors:\n" . $workers->error_summary);
note('completions repeated after a lost acknowledgement: '
	  . $workers->retried_acks);

is( $standby->safe_psql(
		'postgres',
		"SELECT string_agg(DISTINCT status::text, ',') FROM workflow.workflow_runs"),
	'SUCCEEDED',
	'every run SUCCEEDED');
is( $standby->safe_psql(
		'postgres', q{
SELECT count(*) || ' ' || count(DISTINCT workflow_step_id) || ' '
       || count(*) FILTER (WHERE status = 'SUCCEEDED')
  FROM workflow.job_queue}),
	"$JOBS $JOBS $JOBS",
	'one SUCCEEDED job per step: no step ran its release twice');
is( $standby->safe_psql(
		'postgres',
		"SELECT status || ' ' || attempt || ' ' || (worker_id <> 'lost-worker') FROM workflow.job_queue WHERE id = '$lost'"
	),
	'SUCCEEDED 2 true',
	'the lease held at the crash was reaped and its job done by another worker');
is( $standby->safe_psql(
		'postgres', q{
SELECT count(*) FROM workflow.workflow_runs r
  LEFT JOIN workflow.workflow_steps s
    ON s.workflow_run_id = r.id AND s.step_key = r.result_step_key
 WHERE (r.result_step_key IS NOT NULL AND r.result IS DISTINCT FROM s.output)
    OR r.finished_at IS NULL}),
	'0',
	'every run has its result and finished_at');
%acked = %{ $workers->acked };
acked_are_present($standby, 'at the end', \%acked);
unlike($workers->error_summary, qr/duplicate key|internal_state|deadlock/,
	'no worker saw a duplicate release, an internal error or a deadlock');

verify_is_clean($standby, 'at the end, on the new primary');

$standby->stop;
done_testing();
