# The maintenance background worker, with workflow in
# shared_preload_libraries and no other scheduler: nothing in this test
# calls reap_expired, fire_timers, purge or VACUUM.
#
# - a worker session killed with SIGKILL while it holds a lease: the lease
#   is reaped within two maintenance intervals of its expiry, and the job
#   is claimed again;
# - a sleep step wakes by itself; retention purges finished runs and plain
#   jobs; a busy table (the parking queue too) is vacuumed once its dead
#   tuples pass the threshold;
# - workflow.maintenance_status shows each database, what was done, a
#   listed database without the extension and a missing one;
# - a reload adds and removes databases;
# - after a backend crashes (and the postmaster restarts every process)
#   the workers come back and reap again;
# - settings that do not parse are refused; a cancel does not end an idle
#   worker, a terminated one is started again;
# - CREATE DATABASE with a maintained database as template, and DROP
#   DATABASE of a maintained database, succeed at once;
# - the server stops cleanly with the workers running;
# - without the preload the settings exist and the view is empty.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use WorkflowTest;

my $INTERVAL_MS = 500;

my $node = new_workflow_node(
	'maintenance',
	conf => "shared_preload_libraries = 'workflow'\n"
	  . "workflow.maintenance_databases = 'postgres, nosuch, bare'\n"
	  . "workflow.maintenance_interval = '${INTERVAL_MS}ms'\n"
	  . "workflow.retention = '2s'\n"
	  . "workflow.maintenance_vacuum_threshold = 200\n"
	  . "workflow.retry_base_delay_ms = 0\n"
	  . "restart_after_crash = on\n"
	  . "log_min_messages = debug1\n");
$node->safe_psql('postgres', 'CREATE DATABASE bare');

# poll(SQL, WANT, SECONDS): runs SQL until it returns WANT; true if it did.
# A failed connection (the server restarting) counts as another try.
sub poll
{
	my ($sql, $want, $seconds, $db) = @_;
	my $deadline = time + $seconds;
	while (time < $deadline)
	{
		my ($ret, $got) = (0, '');
		$ret = $node->psql($db // 'postgres', $sql, stdout => \$got);
		return 1 if $ret == 0 && $got eq $want;
		usleep(50_000);
	}
	return 0;
}

sub status_of
{
	my ($db, $column) = @_;
	return $node->safe_psql('postgres',
		"SELECT $column FROM workflow.maintenance_status WHERE database = '$db'");
}

# ---- the view --------------------------------------------------------------

ok(poll(q{SELECT state FROM workflow.maintenance_status WHERE database = 'postgres'},
		'maintaining', 10),
	'the database with the extension is being maintained');
ok(poll(q{SELECT state FROM workflow.maintenance_status WHERE database = 'bare'},
		'extension not installed', 10),
	'a listed database without the extension is shown as such');
is(status_of('nosuch', 'state || coalesce(pid::text, \'-\')'), 'no such database-',
	'a listed database that does not exist has no worker');
like(slurp_file($node->logfile),
	qr/WARNING:  workflow maintenance: database "nosuch" of workflow.maintenance_databases does not exist/,
	'the missing database is logged');
my @missing = (slurp_file($node->logfile) =~ /database "nosuch" of workflow/g);
ok(poll(q{SELECT passes > 4 FROM workflow.maintenance_status WHERE database = 'postgres'},
		't', 10),
	'passes follow one another');
@missing = (slurp_file($node->logfile) =~ /database "nosuch" of workflow/g);
is(scalar(@missing), 1, 'the missing database is logged once, not at every pass');
like(slurp_file($node->logfile),
	qr/DEBUG:  workflow maintenance of database "postgres": reaped 0, fired 0, purged 0/,
	'each pass is logged at DEBUG1');

# ---- a killed worker's lease -----------------------------------------------

my $job = $node->safe_psql('postgres',
	q{SELECT workflow.enqueue('maint.lease', timeout_seconds => 1, max_attempts => 3)});
my ($stdin, $stdout, $stderr) = ('', '', '');
my $worker = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
	'<' => \$stdin, '>' => \$stdout, '2>' => \$stderr);
$stdin .= "SELECT id FROM workflow.claim('doomed', ARRAY['maint.lease']);\n";
ok(pump_until($worker, IPC::Run::timer(30), \$stdout, qr/\Q$job\E/),
	'a worker session claims the job');
$worker->signal('KILL');
$worker->finish;
is($node->safe_psql('postgres', "SELECT status || ' ' || attempt FROM workflow.job_queue WHERE id = '$job'"),
	'RUNNING 1', 'the killed worker leaves its lease behind');
ok(poll("SELECT status FROM workflow.job_queue WHERE id = '$job'", 'QUEUED', 15),
	'the maintenance worker gives the job back');
my $late_ms = $node->safe_psql('postgres',
	"SELECT round(extract(epoch FROM updated_at - run_at) * 1000) FROM workflow.job_queue WHERE id = '$job'");
cmp_ok($late_ms, '<=', 2 * $INTERVAL_MS,
	"the lease was reaped within two maintenance intervals of its expiry ($late_ms ms)");
is($node->safe_psql('postgres',
		"SELECT last_error_code FROM workflow.job_queue WHERE id = '$job'"),
	'job.lease_expired', 'the job records the expired lease');
is($node->safe_psql('postgres',
		q{SELECT count(*) || ' ' || min(attempt) FROM workflow.claim('heir', ARRAY['maint.lease'])}),
	'1 2', 'another worker claims the job again, at its second attempt');
cmp_ok(status_of('postgres', 'reaped'), '>=', 1, 'the view counts the reaped lease');

# ---- timers, retention, vacuum ---------------------------------------------

my $nap = $node->safe_psql('postgres',
	q{SELECT workflow.start_run('{"steps": [{"key": "nap", "kind": "sleep", "seconds": 1}]}')});
ok(poll("SELECT status FROM workflow.workflow_runs WHERE id = '$nap'", 'SUCCEEDED', 15),
	'a sleep step wakes, and its run finishes, with no one calling fire_timers');
cmp_ok(status_of('postgres', 'fired'), '>=', 1, 'the view counts the fired timer');
ok(poll("SELECT count(*) FROM workflow.workflow_runs WHERE id = '$nap'", '0', 20),
	'retention purges the finished run');

$node->safe_psql('postgres', q{
SELECT count(workflow.enqueue('maint.churn')) FROM generate_series(1, 600);
SELECT count(workflow.complete_job(c.id, c.lease_token))
  FROM workflow.claim('churner', ARRAY['maint.churn'], 600) c;
});
ok(poll(q{SELECT count(*) FROM workflow.job_queue WHERE job_type = 'maint.churn'}, '0', 20),
	'retention purges finished plain jobs');
ok(poll(q{SELECT vacuum_count > 0 FROM pg_stat_user_tables
           WHERE relid = 'workflow.job_queue'::regclass}, 't', 20),
	'job_queue is vacuumed once its dead tuples pass the threshold');
# the parking queue: 250 root steps of a run under concurrency_cap 1 are
# parked at its start, and each completion lets the next one run, deleting
# its row
is($node->safe_psql('postgres', q{
CREATE TEMP TABLE parked_run AS
SELECT workflow.start_run(jsonb_build_object('limits', '{"concurrency_cap": 1}'::jsonb,
       'steps', (SELECT jsonb_agg(jsonb_build_object('key', 'p' || i, 'job_type', 'maint.parked'))
                   FROM generate_series(1, 251) i))) AS id;
SELECT steps_parked FROM workflow.workflow_runs WHERE id = (SELECT id FROM parked_run);
DO $$
DECLARE
    j record;
BEGIN
    FOR i IN 1 .. 251 LOOP
        SELECT c.id, c.lease_token INTO j FROM workflow.claim('parker', ARRAY['maint.parked']) c;
        PERFORM workflow.complete_job(j.id, j.lease_token);
    END LOOP;
END
$$;
SELECT status FROM workflow.workflow_runs WHERE id = (SELECT id FROM parked_run);
}), "250
SUCCEEDED", 'a run under concurrency_cap 1 lets its 250 parked steps run, one at a time');
ok(poll(q{SELECT vacuum_count > 0 FROM pg_stat_user_tables
           WHERE relid = 'workflow.parked_steps'::regclass}, 't', 20),
	'the parking queue is vacuumed once its dead tuples pass the threshold');
ok(poll(q{SELECT vacuums > 0 AND purged >= 601 FROM workflow.maintenance_status
           WHERE database = 'postgres'}, 't', 10),
	'the view counts the vacuums and the purged runs and jobs');
is(status_of('postgres', 'errors'), '0', 'no pass met an error');

# ---- reload: add and remove databases --------------------------------------

$node->safe_psql('postgres', 'CREATE DATABASE extra');
$node->safe_psql('extra', 'CREATE EXTENSION workflow');
$node->safe_psql('postgres',
	q{ALTER SYSTEM SET workflow.maintenance_databases = 'postgres, extra'});
$node->reload;
ok(poll(q{SELECT string_agg(database || ':' || state, ',' ORDER BY database)
            FROM workflow.maintenance_status}, 'extra:maintaining,postgres:maintaining', 15),
	'a reload starts the added database\'s worker and drops the removed ones');
my $extra_pid = status_of('extra', 'pid');
my $t0;

# ---- settings refused, signals ------------------------------------------------

my ($ret, $out, $err) = $node->psql('postgres',
	q{ALTER SYSTEM SET workflow.maintenance_databases = '"unbalanced'});
isnt($ret, 0, 'a database list that does not parse is refused');
like($err, qr/invalid value for parameter "workflow.maintenance_databases"/,
	'with the setting named');
($ret, $out, $err) = $node->psql('postgres', q{ALTER SYSTEM SET workflow.retention = '-1 day'});
like($err, qr/The retention must not be negative/, 'a negative retention is refused');
($ret, $out, $err) = $node->psql('postgres', q{ALTER SYSTEM SET workflow.retention = 'soon'});
like($err, qr/invalid value for parameter "workflow.retention"/, 'a retention that is not an interval is refused');
is($node->psql('postgres', q{ALTER SYSTEM SET workflow.retention = 'P7D'}), 0,
	'an ISO 8601 retention is accepted');
is($node->psql('postgres', q{ALTER SYSTEM SET workflow.retention = '1 day -1 hour'}), 0,
	'a retention with a negative part but a positive total is accepted');
$node->safe_psql('postgres', q{ALTER SYSTEM SET workflow.retention = '2s'});
$node->reload;

my $pid_before = status_of('postgres', 'pid');
$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid_before)");
usleep(3 * $INTERVAL_MS * 1000);
is(status_of('postgres', 'pid'), $pid_before,
	'a cancel of the idle maintenance worker does not end it');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid_before)");
ok(poll(qq{SELECT pid IS NOT NULL AND pid <> $pid_before AND state = 'maintaining'
             FROM workflow.maintenance_status WHERE database = 'postgres'}, 't', 15),
	'a terminated maintenance worker is started again by the launcher');

# ---- a maintained database as a template ------------------------------------

$t0 = time;
$node->safe_psql('postgres', 'CREATE DATABASE extra_copy TEMPLATE extra');
my $copy_s = time - $t0;
cmp_ok($copy_s, '<', 3,
	sprintf('CREATE DATABASE with a maintained database as template succeeds at once (%.2f s)', $copy_s));
is($node->safe_psql('extra_copy', q{SELECT extversion FROM pg_extension WHERE extname = 'workflow'}),
	$node->safe_psql('extra', q{SELECT extversion FROM pg_extension WHERE extname = 'workflow'}),
	'the copy has the extension');
$node->safe_psql('postgres', 'DROP DATABASE extra_copy');
ok(poll(q{SELECT state FROM workflow.maintenance_status WHERE database = 'extra'},
		'maintaining', 15),
	'the template database is maintained again after the copy');
$extra_pid = status_of('extra', 'pid');

# ---- DROP DATABASE ---------------------------------------------------------

$t0 = time;
$node->safe_psql('postgres', 'DROP DATABASE extra');
my $drop_s = time - $t0;
cmp_ok($drop_s, '<', 3, sprintf('DROP DATABASE of a maintained database succeeds at once (%.2f s)', $drop_s));
ok(poll("SELECT count(*) FROM pg_stat_activity WHERE pid = $extra_pid", '0', 5),
	'its worker is gone');
ok(poll(q{SELECT state FROM workflow.maintenance_status WHERE database = 'extra'},
		'no such database', 10),
	'the view says the database is gone');

# ---- a backend crash --------------------------------------------------------

my $launcher_before = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'workflow maintenance launcher'});
my ($vin, $vout, $verr) = ('', '', '');
my $victim = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
	'<' => \$vin, '>' => \$vout, '2>' => \$verr);
$vin .= "SELECT pg_backend_pid();\n";
ok(pump_until($victim, IPC::Run::timer(30), \$vout, qr/^\d+$/m), 'a backend to crash');
chomp(my $victim_pid = $vout);
kill 'KILL', $victim_pid;
$victim->finish;
ok(poll(q{SELECT 1}, '1', 30), 'the server is back after the crash of a backend');
ok(poll(q{SELECT count(*) FROM pg_stat_activity
           WHERE backend_type = 'workflow maintenance launcher'}, '1', 30),
	'the launcher runs again after the crash');
isnt($node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'workflow maintenance launcher'}),
	$launcher_before, 'the launcher is a new process');
ok(poll(q{SELECT state FROM workflow.maintenance_status WHERE database = 'postgres'},
		'maintaining', 30),
	'the database is maintained again after the crash');
$node->safe_psql('postgres', q{SELECT workflow.enqueue('maint.lost', timeout_seconds => 1)});
my $job2 = $node->safe_psql('postgres', q{SELECT id FROM workflow.claim('lost', ARRAY['maint.lost'])});
isnt($job2, '', 'a second lease is held by a worker that will never report');
ok(poll("SELECT status FROM workflow.job_queue WHERE id = '$job2'", 'QUEUED', 15),
	'after the crash, expired leases are reaped again');

# ---- stop ------------------------------------------------------------------

verify_is_clean($node, 'after the maintenance');
$node->stop('fast');
like(slurp_file($node->logfile), qr/database system is shut down/,
	'the server stops cleanly with the maintenance workers running');

# ---- without the preload ---------------------------------------------------

my $plain = new_workflow_node('no_preload',
	conf => "workflow.maintenance_databases = 'postgres'\n");
is($plain->safe_psql('postgres',
		q{SELECT count(*) FROM workflow.maintenance_status}), '0',
	'without the preload the view is empty');
is($plain->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'workflow maintenance%'}),
	'0', 'without the preload no maintenance process runs');
is($plain->safe_psql('postgres',
		q{SELECT workflow.enqueue('plain') IS NOT NULL; SHOW workflow.maintenance_databases}),
	"t\npostgres", 'without the preload the engine works and the settings exist');
$plain->stop;

done_testing();
