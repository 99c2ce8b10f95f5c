# A backend killed with SIGKILL in the middle of a large release cascade.
#
# One prerequisite with a fan-out of FANOUT dependents (and one join behind
# them).  The prerequisite's complete_job runs in a background psql; a
# test-only BEFORE INSERT trigger on workflow.job_queue makes it sleep once,
# halfway through inserting the released jobs; the backend is then killed
# with SIGKILL.  The postmaster reinitializes (crash recovery) and nothing of
# the half-done transaction may be visible; the job is reclaimed once its
# lease is reaped, and the run completes.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WorkflowTest;

my $FANOUT = 5000;
my $PAUSE_AT = $FANOUT / 2;    # the job insert that sleeps

# restart_after_crash: the postmaster reinitializes after a backend crash
# (Cluster.pm turns it off by default).
my $node = new_workflow_node('crash_cascade',
	conf => "restart_after_crash = on\n");

# ---- the run: root -> d0001..dNNNN -> join ---------------------------------

my @steps = ({ key => 'root', job_type => 'tap.root', timeout_seconds => 2 });
my @dependents = map { sprintf('d%05d', $_) } 1 .. $FANOUT;
push @steps,
  map { { key => $_, job_type => 'tap.fan', depends_on => ['root'] } }
  @dependents;
push @steps,
  { key => 'join', job_type => 'tap.join', depends_on => \@dependents };
my $definition =
  json_text({ name => 'fanout', result_step => 'join', steps => \@steps });

my $run = $node->safe_psql('postgres',
	"SELECT workflow.start_run('$definition')");
like($run, qr/^[0-9a-f-]{36}$/, 'start_run returns the run id');

my ($job, $token) = split /\|/, $node->safe_psql('postgres',
	"SELECT id, lease_token FROM workflow.claim('tap-worker', ARRAY['tap.root'])"
);
ok($job && $token, 'the prerequisite is claimed');

# ---- the pause: a test-only trigger that sleeps once mid-cascade -----------

$node->safe_psql(
	'postgres', qq{
CREATE SEQUENCE public.tap_job_inserts;
CREATE FUNCTION public.tap_pause_once() RETURNS trigger
LANGUAGE plpgsql AS \$\$
BEGIN
    IF nextval('public.tap_job_inserts') = $PAUSE_AT THEN
        PERFORM pg_sleep(3600);
    END IF;
    RETURN NEW;
END
\$\$;
CREATE TRIGGER tap_pause_once BEFORE INSERT ON workflow.job_queue
    FOR EACH ROW EXECUTE FUNCTION public.tap_pause_once();
});

my $bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_until(qr/started/,
	"\\echo started\nSELECT workflow.complete_job('$job', '$token', '{\"root\": true}');\n"
);

ok( $node->poll_query_until(
		'postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE wait_event = 'PgSleep' AND query LIKE '%complete_job%'}),
	'complete_job is paused inside the cascade');

my $pid = $node->safe_psql(
	'postgres', q{
SELECT pid FROM pg_stat_activity
 WHERE wait_event = 'PgSleep' AND query LIKE '%complete_job%'});

# What the paused transaction has written so far, seen from its own
# sequence (non-transactional): PAUSE_AT - 1 jobs inserted, the dependents'
# steps already updated, none of it committed.
is($node->safe_psql('postgres',
	'SELECT last_value FROM public.tap_job_inserts'),
	$PAUSE_AT, "the cascade is paused at job insert $PAUSE_AT of $FANOUT");
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM workflow.job_queue WHERE workflow_run_id = '$run'"),
	'1',
	'other sessions see none of the released jobs before the crash');

# ---- the crash ------------------------------------------------------------

my $log_offset = -s $node->logfile;
ok(kill('KILL', $pid), "backend $pid killed with SIGKILL");
$node->wait_for_log(qr/all server processes terminated; reinitializing/,
	$log_offset);
ok($node->poll_query_until('postgres', 'SELECT 1', '1'),
	'the server accepts connections after crash recovery');
my $log = slurp_file($node->logfile, $log_offset);
like($log, qr/server process \(PID $pid\) was terminated by signal 9/,
	'the postmaster saw the backend die of SIGKILL');
like($log, qr/database system is ready to accept connections/,
	'crash recovery completed');

# the background psql lost its connection without an acknowledgement
# (finish closes its input and waits for it to exit)
eval { $bg->{run}->finish; };
unlike($bg->{stdout}, qr/^\s*\S/m, 'complete_job returned nothing');
like($bg->{stderr}, qr/server closed the connection|connection to server was lost/,
	'the completing session lost its connection');

$node->safe_psql(
	'postgres', q{
DROP TRIGGER tap_pause_once ON workflow.job_queue;
DROP FUNCTION public.tap_pause_once();
DROP SEQUENCE public.tap_job_inserts;
});

# ---- nothing of the killed transaction is visible --------------------------

is( $node->safe_psql(
		'postgres',
		"SELECT status || ' ' || attempt || ' ' || (lease_token = '$token')"
		  . " FROM workflow.job_queue WHERE id = '$job'"),
	'RUNNING 1 true',
	'the prerequisite job is still RUNNING with the same lease');
is( $node->safe_psql(
		'postgres',
		"SELECT status FROM workflow.workflow_steps"
		  . " WHERE workflow_run_id = '$run' AND step_key = 'root'"),
	'RUNNING',
	'the prerequisite step is still RUNNING');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM workflow.job_queue WHERE workflow_run_id = '$run'"),
	'1',
	'no dependent has a job');
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FILTER (WHERE status = 'BLOCKED' AND released_at IS NULL
                          AND job_id IS NULL AND dependency_count_pending = 1)
       || ' ' || count(*)
  FROM workflow.workflow_steps
 WHERE workflow_run_id = '$run' AND step_key <> 'root' AND step_key <> 'join'}),
	"$FANOUT $FANOUT",
	'every dependent is BLOCKED, unreleased, with its prerequisite pending');
is( $node->safe_psql(
		'postgres', qq{
SELECT r.status || ' ' || c.steps_active || ' ' || c.steps_blocked || ' '
       || c.steps_succeeded || ' ' || (r.finished_at IS NULL)
  FROM workflow.workflow_runs r, workflow.run_counters(r.id) c WHERE r.id = '$run'}),
	'RUNNING 1 ' . ($FANOUT + 1) . ' 0 true',
	'the run row is as before the completion');
verify_is_clean($node, 'after crash recovery');

# ---- the lease is reaped and the job reclaimed -----------------------------

ok( $node->poll_query_until(
		'postgres', 'SELECT workflow.reap_expired() = 1'),
	'reap_expired expires the lease held by the killed session');
is( $node->safe_psql(
		'postgres',
		"SELECT status || ' ' || last_error_code || ' ' || (lease_token IS NULL)"
		  . " FROM workflow.job_queue WHERE id = '$job'"),
	'QUEUED job.lease_expired true',
	'the reaped job is QUEUED again without a lease');

my ($rc, $out, $err) = $node->psql('postgres',
	"SELECT workflow.complete_job('$job', '$token', '{\"root\": true}')");
ok($rc != 0 && $err =~ /job\.lease_lost/,
	'the token of the killed session is fenced off (job.lease_lost)');

my ($job2, $token2) = split /\|/, $node->safe_psql('postgres',
	"SELECT id, lease_token, attempt FROM workflow.claim('tap-worker-2', ARRAY['tap.root'])"
);
is($job2, $job, 'the prerequisite job is claimed again');
$node->safe_psql('postgres',
	"SELECT workflow.complete_job('$job', '$token2', '{\"root\": true}')");
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FILTER (WHERE j.status = 'QUEUED' AND s.status = 'ENQUEUED')
  FROM workflow.workflow_steps s
  JOIN workflow.job_queue j ON j.id = s.job_id
 WHERE s.workflow_run_id = '$run' AND s.step_key LIKE 'd%'}),
	$FANOUT,
	"the completion releases all $FANOUT dependents, once");

# ---- the run completes -----------------------------------------------------

$node->safe_psql(
	'postgres', q{
DO $$
DECLARE
    ids uuid[];
    tokens uuid[];
    outputs jsonb[];
BEGIN
    LOOP
        SELECT array_agg(c.id ORDER BY c.id),
               array_agg(c.lease_token ORDER BY c.id),
               array_agg(jsonb_build_object('job', c.id) ORDER BY c.id)
          INTO ids, tokens, outputs
          FROM workflow.claim('tap-drain', NULL, 500) c;
        EXIT WHEN ids IS NULL;
        PERFORM workflow.complete_jobs(ids, tokens, outputs);
        COMMIT;
    END LOOP;
END
$$});

is( $node->safe_psql(
		'postgres', qq{
SELECT r.status || ' ' || r.steps_succeeded || ' ' || (r.finished_at IS NOT NULL)
       || ' ' || (r.result = s.output)
  FROM workflow.workflow_runs r
  JOIN workflow.workflow_steps s ON s.workflow_run_id = r.id AND s.step_key = 'join'
 WHERE r.id = '$run'}),
	'SUCCEEDED ' . ($FANOUT + 2) . ' true true',
	'the run SUCCEEDED with every step, and its result is the join output');
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FROM (
    SELECT workflow_step_id FROM workflow.job_queue
     WHERE workflow_run_id = '$run'
     GROUP BY workflow_step_id HAVING count(*) > 1) d}),
	'0',
	'no step was released twice');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM workflow.job_queue WHERE workflow_run_id = '$run'"),
	$FANOUT + 2,
	'one job per step');

verify_is_clean($node, 'at the end');

$node->stop;
done_testing();
