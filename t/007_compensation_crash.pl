# A saga's compensation chain is rows: a crash in the middle of it loses
# nothing, and the chain goes on after the restart to the same end.
#
# Two runs of the same definition: six steps, each with a compensate job,
# released one after another (fan-out and a join, so the completion order
# is not the definition's order), and a last step that fails for good.
# Both are compensated with the same script of worker outcomes: the
# compensation of step "c" fails for good, the others succeed.  The first
# run is worked to its end without a crash.  The second is stopped in the
# middle: two compensations acknowledged, the third claimed by a worker
# when the server is stopped with 'immediate' (no shutdown checkpoint).
# After the restart, the claimed job's lease is expired by hand and reaped,
# the worker that held it comes back too late (job.lease_lost), and the
# chain is worked to its end.  Both runs undo their steps in the same
# order, the reverse of their completion order, and end
# COMPENSATION_FAILED with one failed compensation; verify() is clean.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WorkflowTest;

my $node = new_workflow_node('compensation_crash');

sub sql { return $node->safe_psql('postgres', $_[0]); }

my @steps = (
	{ key => 'a', job_type => 'saga.a' },
	{ key => 'b', job_type => 'saga.b', depends_on => ['a'] },
	{ key => 'c', job_type => 'saga.c', depends_on => ['a'] },
	{ key => 'd', job_type => 'saga.d', depends_on => ['c'] },
	{ key => 'e', job_type => 'saga.e', depends_on => [ 'b', 'd' ] },
	{ key => 'f', job_type => 'saga.f', depends_on => ['e'] },
	{
		key => 'last',
		job_type => 'saga.last',
		depends_on => ['f'],
		max_attempts => 1
	});
$_->{compensate} = { job_type => 'saga.undo', payload => { undo => $_->{key} } }
  for grep { $_->{key} ne 'last' } @steps;
my $def = json_text({ name => 'saga', steps => \@steps });

# forward(RUN): works the run's steps in this order, the last one failing.
sub forward
{
	my ($run) = @_;
	for my $type (qw(a c b d e f last))
	{
		my ($id, $token) = split /\|/,
		  sql("SELECT id, lease_token FROM workflow.claim('fw', ARRAY['saga.$type'])");
		die "no job saga.$type" unless $token;
		if ($type eq 'last')
		{
			sql("SELECT workflow.fail_job('$id', '$token', 'saga.boom', 'no', false)");
		}
		else
		{
			sql("SELECT workflow.complete_job('$id', '$token', '{\"done\": \"$type\"}')");
		}
	}
	return sql("SELECT status FROM workflow.workflow_runs WHERE id = '$run'");
}

# claim_undo(RUN): the run's queued compensation job, claimed: (id, token,
# the step it undoes).
sub claim_undo
{
	my ($run) = @_;
	my ($id, $token) = split /\|/,
	  sql("SELECT id, lease_token FROM workflow.claim('undo', ARRAY['saga.undo'])");
	die "no compensation job" unless $token;
	my $key = sql("SELECT payload->>'step_key' FROM workflow.job_queue WHERE id = '$id'");
	return ($id, $token, $key);
}

# finish_undo(ID, TOKEN, KEY): the scripted outcome: c fails, the others succeed.
sub finish_undo
{
	my ($id, $token, $key) = @_;
	if ($key eq 'c')
	{
		sql("SELECT workflow.fail_job('$id', '$token', 'saga.undo_failed', 'c stays', false)");
	}
	else
	{
		sql("SELECT workflow.complete_job('$id', '$token')");
	}
}

# undone_order(RUN): the steps in the order their compensation started.
sub undone_order
{
	my ($run) = @_;
	return sql(
		"SELECT string_agg(step_key, ',' ORDER BY id) FROM workflow.workflow_events"
		  . " WHERE workflow_run_id = '$run' AND event_type = 'step_compensating'");
}

# ---- the run without a crash ------------------------------------------------

my $ref = sql("SELECT workflow.start_run('$def')");
is(forward($ref), 'COMPLETED_WITH_ERRORS', 'reference run: the last step failed');
my $completion_order = sql(
	"SELECT string_agg(step_key, ',' ORDER BY completion_seq DESC)"
	  . " FROM workflow.workflow_steps WHERE workflow_run_id = '$ref'"
	  . " AND completion_seq IS NOT NULL");
is($completion_order, 'f,e,d,b,c,a',
	'reference run: the completion order, last first');
is(sql("SELECT workflow.compensate_run('$ref', 'undo')"),
	'COMPENSATING', 'reference run: compensation started');
for (1 .. 6) { finish_undo(claim_undo($ref)); }
my $ref_end = sql(
	"SELECT status || ' ' || compensations_failed FROM workflow.workflow_runs WHERE id = '$ref'");
is($ref_end, 'COMPENSATION_FAILED 1',
	'reference run: ends COMPENSATION_FAILED with one failed compensation');
is(undone_order($ref), $completion_order,
	'reference run: undone in reverse completion order');

# ---- the run that crashes in the middle -------------------------------------

my $run = sql("SELECT workflow.start_run('$def')");
is(forward($run), 'COMPLETED_WITH_ERRORS', 'crashed run: the last step failed');
is(sql("SELECT workflow.compensate_run('$run', 'undo')"),
	'COMPENSATING', 'crashed run: compensation started');
finish_undo(claim_undo($run)) for 1 .. 2;
my ($held, $held_token, $held_key) = claim_undo($run);
is($held_key, 'd', 'crashed run: the third compensation (of d) is claimed');
my $before = sql(
	"SELECT string_agg(step_key || ':' || status, ',' ORDER BY step_key)"
	  . " FROM workflow.workflow_steps WHERE workflow_run_id = '$run'");

$node->stop('immediate');
$node->start;

is( sql("SELECT string_agg(step_key || ':' || status, ',' ORDER BY step_key)"
		  . " FROM workflow.workflow_steps WHERE workflow_run_id = '$run'"),
	$before,
	'after the restart: every step as it was, the acknowledged compensations kept');
is( sql(
		"SELECT count(*) FROM workflow.job_queue WHERE workflow_run_id = '$run'"
		  . " AND compensation AND status IN ('QUEUED', 'RUNNING')"),
	'1',
	'after the restart: one live compensation job, the claimed one');

# the claimed job's lease runs out; the reaper gives it back
sql("UPDATE workflow.job_queue SET leased_until = now() - interval '1 second' WHERE id = '$held'");
is(sql('SELECT workflow.reap_expired()'), '1', 'the expired compensation job is reaped');
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	"SELECT workflow.complete_job('$held', '$held_token')");
like($stderr, qr/job\.lease_lost/, 'its old holder comes back too late: job.lease_lost');

for (1 .. 4) { finish_undo(claim_undo($run)); }
is( sql("SELECT status || ' ' || compensations_failed FROM workflow.workflow_runs WHERE id = '$run'"),
	$ref_end,
	'crashed run: ends as the reference run did');
is(undone_order($run), $completion_order,
	'crashed run: undone in the same order, the reverse of its completion order');
is( sql(
		"SELECT count(*) FROM workflow.job_queue WHERE workflow_run_id IN ('$ref', '$run')"
		  . " AND status IN ('QUEUED', 'RUNNING')"),
	'0',
	'no live job is left in either run');
verify_is_clean($node, 'after the chains ended');

done_testing();
