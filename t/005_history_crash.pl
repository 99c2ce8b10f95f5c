# A backend killed between a state change and its history event.
#
# A run of two job steps, a -> b.  A test-only BEFORE INSERT trigger on
# workflow.workflow_events makes a chosen event's insert sleep; the backend
# is then killed with SIGKILL and the postmaster reinitializes.  Twice:
#
#   1. while a's complete_job writes step_succeeded, in the statement that
#      has already moved the step (the event is a WITH query of it);
#   2. while b's complete_job writes the run's run_status_changed, a
#      statement after the one that changed the run row (and after b's own
#      step_succeeded).
#
# After each recovery, neither the change nor its event may be visible:
# the step and the run are as before, and so is the history.  Then the
# leases are reaped, the steps done again, and the history of the finished
# run agrees with its steps (verify()) and reads in the order it happened.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WorkflowTest;

my $node = new_workflow_node('history_crash',
	conf => "restart_after_crash = on\n");

my $definition = json_text(
	{
		steps => [
			{ key => 'a', job_type => 'tap.a', timeout_seconds => 1 },
			{
				key => 'b',
				job_type => 'tap.b',
				timeout_seconds => 1,
				depends_on => ['a']
			}
		]
	});
my $run = $node->safe_psql('postgres',
	"SELECT workflow.start_run('$definition')");

# history(): the run's events as "key:type" (key "-" for run events)
sub history
{
	return $node->safe_psql(
		'postgres', qq{
SELECT string_agg(coalesce(step_key, '-') || ':' || event_type, ' ' ORDER BY id)
  FROM workflow.run_history('$run')});
}

# state(): the steps' and the run's status
sub state
{
	return $node->safe_psql(
		'postgres', qq{
SELECT string_agg(step_key || '=' || status, ' ' ORDER BY step_key)
       || ' run=' || (SELECT status FROM workflow.workflow_runs WHERE id = '$run')
  FROM workflow.workflow_steps WHERE workflow_run_id = '$run'});
}

# claim(TYPE, WORKER): (id, token) of one claimed job
sub claim
{
	my ($type, $worker) = @_;
	my ($id, $token) = split /\|/, $node->safe_psql('postgres',
		"SELECT id, lease_token FROM workflow.claim('$worker', ARRAY['$type'])"
	);
	die "nothing to claim of type $type" unless $token;
	return ($id, $token);
}

# kill_during(EVENT_FILTER, SQL, LABEL): runs SQL in a background session
# whose insert of the first event matching EVENT_FILTER (an expression on
# NEW) sleeps, kills that backend with SIGKILL, and waits for the server
# to come back from crash recovery.
sub kill_during
{
	my ($filter, $sql, $label) = @_;

	$node->safe_psql(
		'postgres', qq{
CREATE FUNCTION public.tap_pause() RETURNS trigger
LANGUAGE plpgsql AS \$\$
BEGIN
    IF $filter THEN
        PERFORM pg_sleep(3600);
    END IF;
    RETURN NEW;
END
\$\$;
CREATE TRIGGER tap_pause BEFORE INSERT ON workflow.workflow_events
    FOR EACH ROW EXECUTE FUNCTION public.tap_pause();
});

	my $bg = $node->background_psql('postgres', on_error_stop => 0);
	$bg->query_until(qr/started/, "\\echo started\n$sql;\n");
	ok( $node->poll_query_until(
			'postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE wait_event = 'PgSleep' AND query LIKE '%complete_job%'}),
		"$label: the completion is paused in its event's insert");
	my $pid = $node->safe_psql(
		'postgres', q{
SELECT pid FROM pg_stat_activity
 WHERE wait_event = 'PgSleep' AND query LIKE '%complete_job%'});

	my $log_offset = -s $node->logfile;
	ok(kill('KILL', $pid), "$label: backend $pid killed with SIGKILL");
	$node->wait_for_log(qr/all server processes terminated; reinitializing/,
		$log_offset);
	ok($node->poll_query_until('postgres', 'SELECT 1', '1'),
		"$label: the server accepts connections after crash recovery");
	like(slurp_file($node->logfile, $log_offset),
		qr/database system is ready to accept connections/,
		"$label: crash recovery completed");
	eval { $bg->{run}->finish; };
	unlike($bg->{stdout}, qr/^\s*\S/m, "$label: the completion returned nothing");

	$node->safe_psql(
		'postgres', q{
DROP TRIGGER tap_pause ON workflow.workflow_events;
DROP FUNCTION public.tap_pause();
});
}

# reap_and_redo(TYPE, KEY): reaps the killed session's lease, then claims
# and completes the job again
sub reap_and_redo
{
	my ($type, $key) = @_;
	ok($node->poll_query_until('postgres', 'SELECT workflow.reap_expired() = 1'),
		"$key: the killed session's lease is reaped");
	my ($id, $token) = claim($type, "worker-$key-2");
	$node->safe_psql('postgres',
		"SELECT workflow.complete_job('$id', '$token', '{\"$key\": 2}')");
}

# ---- 1. killed inside the statement that moves the step ---------------------

my ($a_job, $a_token) = claim('tap.a', 'worker-a-1');
is(history(), '-:run_started a:step_released a:step_started',
	'before the first crash: started, a released and claimed');
kill_during(q{NEW.event_type = 'step_succeeded' AND NEW.step_key = 'a'},
	"SELECT workflow.complete_job('$a_job', '$a_token', '{\"a\": 1}')",
	'step event');
is(state(), 'a=RUNNING b=BLOCKED run=RUNNING',
	'step event: a is still RUNNING, b BLOCKED, the run RUNNING');
is(history(), '-:run_started a:step_released a:step_started',
	'step event: the history is as before');
verify_is_clean($node, 'after the first crash');

reap_and_redo('tap.a', 'a');
is(state(), 'a=SUCCEEDED b=ENQUEUED run=RUNNING',
	'a completed again: a SUCCEEDED, b released');

# ---- 2. killed between the run row's change and its event ----------------

my ($b_job, $b_token) = claim('tap.b', 'worker-b-1');
my $before = history();
kill_during(
	q{NEW.event_type = 'run_status_changed' AND NEW.detail ->> 'to' = 'SUCCEEDED'},
	"SELECT workflow.complete_job('$b_job', '$b_token', '{\"b\": 1}')",
	'run event');
is(state(), 'a=SUCCEEDED b=RUNNING run=RUNNING',
	'run event: b is still RUNNING and the run RUNNING');
is(history(), $before,
	"run event: the history is as before, without b's step_succeeded");
is( $node->safe_psql(
		'postgres',
		"SELECT finished_at IS NULL AND result IS NULL FROM workflow.workflow_runs WHERE id = '$run'"
	),
	't',
	'run event: the run row has no finish time and no result');
verify_is_clean($node, 'after the second crash');

reap_and_redo('tap.b', 'b');

# ---- the finished run's history --------------------------------------------

is(state(), 'a=SUCCEEDED b=SUCCEEDED run=SUCCEEDED', 'the run finished');
is( history(),
	join(' ',
		qw(-:run_started a:step_released a:step_started a:step_lease_expired
		  a:step_started a:step_succeeded b:step_released b:step_started
		  b:step_lease_expired b:step_started b:step_succeeded
		  -:run_status_changed)),
	'the history holds every change once, in order, and nothing of the killed sessions');
is( $node->safe_psql(
		'postgres', qq{
SELECT string_agg(step_key || ' ' || (detail ->> 'attempt') || ' ' || (detail ->> 'worker_id'),
                  ', ' ORDER BY id)
  FROM workflow.run_history('$run') WHERE event_type = 'step_started'}),
	'a 1 worker-a-1, a 2 worker-a-2, b 1 worker-b-1, b 2 worker-b-2',
	'each attempt started once, by its worker');
verify_is_clean($node, 'at the end');

$node->stop;
done_testing();
