# The server crashes (immediate stop) while several workers claim and
# complete jobs, then restarts.
#
# Four workers (psql sessions driven by WorkflowTest::Workers) claim and
# complete jobs of RUNS layered runs in autocommit and log every
# acknowledged completion (a complete_job whose commit returned) to a file.
# After ACKS_BEFORE_CRASH acknowledgements the server is stopped with
# 'immediate' (no shutdown checkpoint; every backend dies mid-statement) and
# started again, which runs crash recovery.  Then:
# - every acknowledged completion is there, SUCCEEDED with its worker's
#   output, before any worker resumes;
# - verify() is clean on the recovered state;
# - the workers reconnect (repeating the completion whose acknowledgement
#   the crash ate) and, reaping the leases held at the crash, finish every
#   run; no step ever got a second job.
#
# Cluster.pm runs the server with fsync = off.  An immediate stop kills the
# server processes, not the kernel's page cache, so what a commit wrote to
# the WAL survives: this is a process crash, not a power loss.

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
my $STEPS_PER_RUN = 0;
$STEPS_PER_RUN += $_ for @WIDTHS;
my $JOBS = $RUNS * $STEPS_PER_RUN;
my $ACKS_BEFORE_CRASH = int($JOBS / 3);

my $node = new_workflow_node('crash_restart');

for my $r (1 .. $RUNS)
{
	my $def = layered_definition("load-$r", $r, @WIDTHS);
	$node->safe_psql('postgres', "SELECT workflow.start_run('$def')");
}

# One more run whose three roots a worker claims and never finishes: it
# dies with the server, so its leases are held at the crash and only
# reap_expired gives the jobs back.
my $lost_def = json_text(
	{
		name => 'lost',
		steps => [
			(
				map { { key => "r$_", job_type => 'tap.lost', timeout_seconds => 6 } }
				  1 .. 3
			),
			{ key => 'join', job_type => 'tap.join', depends_on => [qw(r1 r2 r3)] }
		]
	});
$node->safe_psql('postgres', "SELECT workflow.start_run('$lost_def')");
$RUNS++;
$JOBS += 4;
my $lost = $node->safe_psql('postgres',
	"SELECT string_agg(id::text, ',' ORDER BY id) FROM workflow.claim('lost-worker', ARRAY['tap.lost'], 3)"
);
my @lost = split /,/, $lost;
is(scalar @lost, 3, 'a worker that will not come back holds three leases');
my $lost_list = join(',', map { "'$_'" } @lost);

is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM workflow.workflow_steps"),
	$JOBS,
	"$RUNS runs with $JOBS steps started");

my $ack_log = PostgreSQL::Test::Utils::tempdir() . '/acks.log';
my $workers = WorkflowTest::Workers->new(
	node => $node,
	workers => 4,
	log => $ack_log);

# ---- load, then the crash --------------------------------------------------

ok( $workers->run_until(
		sub { keys %{ $workers->acked } >= $ACKS_BEFORE_CRASH },
		120, "$ACKS_BEFORE_CRASH acknowledged completions"),
	"workers acknowledged $ACKS_BEFORE_CRASH completions");
my $in_flight = $workers->in_flight;
$node->stop('immediate');
note("crashed with $in_flight worker commands in flight");

# Collect what psql had already printed, then let the sessions notice that
# the server is gone.
$workers->paused(1);
ok($workers->run_until(sub { $workers->n_up == 0 }, 60, 'workers to lose their sessions'),
	'every worker session ended with the server');

my %acked = %{ $workers->acked };
my @log_lines = split /\n/, slurp_file($ack_log);
is(scalar @log_lines, scalar keys %acked,
	'the acknowledgement log has one line per acknowledged completion');
cmp_ok(scalar keys %acked, '<', $JOBS, 'the crash came before the end of the load');

my $log_offset = -s $node->logfile;
$node->start;
like(slurp_file($node->logfile, $log_offset),
	qr/database system was not properly shut down; automatic recovery in progress/,
	'the restart ran crash recovery');

# ---- the recovered state, before any worker resumes -----------------------


acked_are_present($node, 'after crash recovery', \%acked);
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM (
    SELECT workflow_step_id FROM workflow.job_queue
     GROUP BY workflow_step_id HAVING count(*) > 1) d}),
	'0',
	'after crash recovery: no step has two jobs');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(status || ' ' || worker_id, ',') FROM workflow.job_queue WHERE id IN ($lost_list)"
	),
	'RUNNING lost-worker,RUNNING lost-worker,RUNNING lost-worker',
	'after crash recovery: the leases held at the crash are still held');
verify_is_clean($node, 'after crash recovery');

# ---- the workers resume and the runs finish -------------------------------

my $last_check = 0;
my $finished = sub {
	return 0 if time - $last_check < 0.5;
	$last_check = time;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM workflow.workflow_runs WHERE finished_at IS NOT NULL"
	) == $RUNS;
};
$workers->paused(0);
ok($workers->run_until($finished, 180, 'every run to finish'),
	'every run finishes after the workers resume');
$workers->stop;

note("worker errors:\n" . $workers->error_summary);
note('completions repeated after a lost acknowledgement: '
	  . $workers->retried_acks);
note('jobs claimed more than once: '
	  . $node->safe_psql('postgres',
		"SELECT count(*) FROM workflow.job_queue WHERE attempt > 1"));
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM workflow.job_queue WHERE id IN ($lost_list)"
		  . " AND status = 'SUCCEEDED' AND attempt = 2 AND worker_id <> 'lost-worker'"),
	'3',
	'the leases held at the crash were reaped and their jobs done by other workers');

is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(DISTINCT status::text, ',') FROM workflow.workflow_runs"),
	'SUCCEEDED',
	'every run SUCCEEDED');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FILTER (WHERE s.status = 'SUCCEEDED' AND j.status = 'SUCCEEDED')
  FROM workflow.workflow_steps s JOIN workflow.job_queue j ON j.id = s.job_id}),
	$JOBS,
	'every step SUCCEEDED with its job');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) || ' ' || count(DISTINCT workflow_step_id)
  FROM workflow.job_queue}),
	"$JOBS $JOBS",
	'one job per step: no step ran its release twice');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM workflow.workflow_runs r
  JOIN workflow.workflow_steps s
    ON s.workflow_run_id = r.id AND s.step_key = r.result_step_key
 WHERE r.result IS DISTINCT FROM s.output OR r.finished_at IS NULL}),
	'0',
	'every run has its result and finished_at');
%acked = %{ $workers->acked };
acked_are_present($node, 'at the end', \%acked);
unlike($workers->error_summary, qr/duplicate key|internal_state|deadlock/,
	'no worker saw a duplicate release, an internal error or a deadlock');

verify_is_clean($node, 'at the end');

$node->stop;
done_testing();
