# Timers and events are rows: a crash loses none of them.
#
# A run sleeps, waits for one event that was sent and acknowledged before
# the crash (buffered: its step is not released yet), and waits for a
# second event with a timeout.  The server is stopped with 'immediate'
# (no shutdown checkpoint) and started again.  Then:
# - the sleeping step is still SLEEPING with its wake time, the waiting
#   step still waits with its deadline, and the acknowledged event is in
#   the inbox, unconsumed;
# - fire_timers wakes the sleep once its time has come (moved back by
#   hand), which releases the step that consumes the buffered event;
# - an event sent after the restart completes the waiting step;
# - the run finishes and verify() is clean.
#
# A send_event whose commit was acknowledged survives like any commit; a
# timer never fires early: before its time, fire_timers finds nothing.
#
# The new labels (SLEEP, EVENT, SLEEPING) are usable in the transaction
# that installs the extension, so that a dump holding a sleeping step
# restores in one transaction (pg_restore --single-transaction), and
# CREATE EXTENSION and a first run with a sleep step may share one.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WorkflowTest;

my $node = new_workflow_node('timers_crash');

my $def = json_text(
	{
		name => 'timers',
		steps => [
			{ key => 'nap', kind => 'sleep', seconds => 3600 },
			{
				key => 'paid',
				kind => 'event',
				event => 'payment',
				depends_on => ['nap']
			},
			{
				key => 'answer',
				kind => 'event',
				wait_timeout_seconds => 86400
			},
		]
	});
my $run = $node->safe_psql('postgres', "SELECT workflow.start_run('$def')");
like($run, qr/^[0-9a-f-]{36}$/, 'a run with a sleep and two event waits started');

my $event = $node->safe_psql('postgres',
	"SELECT id FROM workflow.send_event('$run', 'payment', '{\"amount\": 42}')");
like($event, qr/^[0-9a-f-]{36}$/, 'the payment event was sent and acknowledged');

my $before = $node->safe_psql('postgres',
	"SELECT string_agg(step_key || ':' || status || ':' || (wake_at IS NOT NULL), ',' ORDER BY step_key)"
	  . " FROM workflow.workflow_steps WHERE workflow_run_id = '$run'");
is($before, 'answer:WAITING_FOR_EXTERNAL:true,nap:SLEEPING:true,paid:BLOCKED:false',
	'before the crash: one step sleeps, one waits with a deadline, one is blocked');
my $wake_before = $node->safe_psql('postgres',
	"SELECT wake_at FROM workflow.workflow_steps WHERE workflow_run_id = '$run' AND step_key = 'nap'");

$node->stop('immediate');
$node->start;

is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(step_key || ':' || status || ':' || (wake_at IS NOT NULL), ',' ORDER BY step_key)"
		  . " FROM workflow.workflow_steps WHERE workflow_run_id = '$run'"),
	$before,
	'after the restart: the same statuses and timers');
is( $node->safe_psql(
		'postgres',
		"SELECT wake_at FROM workflow.workflow_steps WHERE workflow_run_id = '$run' AND step_key = 'nap'"),
	$wake_before,
	'the sleep keeps its wake time');
is( $node->safe_psql(
		'postgres',
		"SELECT consumed_at IS NULL FROM workflow.event_inbox WHERE id = '$event'"),
	't',
	'the acknowledged event is in the inbox, unconsumed');

is($node->safe_psql('postgres', 'SELECT workflow.fire_timers()'),
	'0', 'no timer is due yet: fire_timers fires nothing');

$node->safe_psql('postgres',
	"UPDATE workflow.workflow_steps SET wake_at = now() - interval '1 second'"
	  . " WHERE workflow_run_id = '$run' AND step_key = 'nap'");
is($node->safe_psql('postgres', 'SELECT workflow.fire_timers()'),
	'1', 'once its time has come, the sleep is fired');
is( $node->safe_psql(
		'postgres',
		"SELECT status || ':' || output::text FROM workflow.workflow_steps"
		  . " WHERE workflow_run_id = '$run' AND step_key = 'paid'"),
	'SUCCEEDED:{"amount": 42}',
	'its release consumed the event sent before the crash');

is( $node->safe_psql(
		'postgres',
		"SELECT consumed_by_step_key FROM workflow.send_event('$run', 'answer', '\"yes\"')"),
	'answer',
	'an event sent after the restart completes the waiting step');
is( $node->safe_psql(
		'postgres', "SELECT status FROM workflow.workflow_runs WHERE id = '$run'"),
	'SUCCEEDED',
	'the run finished');
verify_is_clean($node, 'after the crash and the timers');

# One transaction: install, and start a run with a sleep and an event step.
$node->safe_psql('postgres', 'CREATE DATABASE onetx');
is( $node->safe_psql(
		'onetx', "BEGIN; CREATE EXTENSION workflow;"
		  . " SELECT workflow.start_run('$def') IS NOT NULL;"
		  . " SELECT (workflow.send_event(r.id, 'answer')).id IS NOT NULL"
		  . "   FROM workflow.workflow_runs r;"
		  . " COMMIT;"),
	"t\nt",
	'CREATE EXTENSION and a run with sleep and event steps in one transaction');

# A dump with a sleeping step and a buffered event, restored in one
# transaction into a new database.
my $dumpdir = PostgreSQL::Test::Utils::tempdir();
my $sleeper = $node->safe_psql('postgres', "SELECT workflow.start_run('$def')");
$node->safe_psql('postgres',
	"SELECT workflow.send_event('$sleeper', 'payment', '{\"amount\": 7}')");
$node->command_ok(
	[ 'pg_dump', '-Fc', '-f', "$dumpdir/timers.dump", '-d', 'postgres' ],
	'pg_dump of a database with a sleeping step and a buffered event');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok(
	[
		'pg_restore', '--exit-on-error', '--single-transaction',
		'-d', 'restored', "$dumpdir/timers.dump"
	],
	'pg_restore --single-transaction');
is( $node->safe_psql(
		'restored',
		"SELECT string_agg(step_key || ':' || status, ',' ORDER BY step_key)"
		  . " FROM workflow.workflow_steps WHERE workflow_run_id = '$sleeper'"),
	'answer:WAITING_FOR_EXTERNAL,nap:SLEEPING,paid:BLOCKED',
	'the restored run sleeps and waits as the original');
$node->safe_psql('restored',
	"UPDATE workflow.workflow_steps SET wake_at = now() - interval '1 second'"
	  . " WHERE workflow_run_id = '$sleeper' AND step_key = 'nap'");
is($node->safe_psql('restored', 'SELECT workflow.fire_timers()'),
	'1', 'the restored timer fires');
is( $node->safe_psql(
		'restored',
		"SELECT status || ':' || output::text FROM workflow.workflow_steps"
		  . " WHERE workflow_run_id = '$sleeper' AND step_key = 'paid'"),
	'SUCCEEDED:{"amount": 7}',
	'and the restored buffered event is consumed');
verify_is_clean($node, 'the restored copy', 'restored');

$node->stop;
done_testing();
