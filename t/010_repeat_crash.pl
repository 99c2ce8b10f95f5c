# A backend killed with SIGKILL in the middle of a loop's body reset.
#
# A review loop with a wide body: draft -> p001..pNNN -> review -> again
# (repeat back to draft).  Generation 0 runs; the review's complete_job,
# whose output keeps the loop going, runs in a background psql, and a
# test-only BEFORE UPDATE trigger on workflow.workflow_steps makes it sleep
# once, halfway through moving the body to generation 1; the backend is then
# killed.  After crash recovery nothing of the reset is visible: the body is
# at generation 0, the review's job RUNNING under the dead session's lease.
# Once the lease is reaped, the review runs again and the loop goes on from
# the same generation, to its end.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WorkflowTest;

my $WIDTH = 200;
my $BODY = $WIDTH + 2;             # draft, the p steps, review
my $PAUSE_AT = int($BODY / 2);     # the body row whose reset sleeps

my $node = new_workflow_node('repeat_crash',
	conf => "restart_after_crash = on\n");

my @parallel = map { sprintf('p%03d', $_) } 1 .. $WIDTH;
my @steps = ({ key => 'draft', job_type => 'tap.draft' });
push @steps,
  map { { key => $_, job_type => 'tap.part', depends_on => ['draft'] } }
  @parallel;
push @steps,
  {
	key => 'review',
	job_type => 'tap.review',
	timeout_seconds => 2,
	depends_on => \@parallel
  },
  {
	key => 'again',
	kind => 'repeat',
	depends_on => ['review'],
	back_to => ['draft'],
	while => '$.approved == false',
	max_iterations => 3
  };
my $definition = json_text({ name => 'loop', steps => \@steps });

my $run = $node->safe_psql('postgres',
	"SELECT workflow.start_run('$definition')");
like($run, qr/^[0-9a-f-]{36}$/, 'start_run returns the run id');

# drain(types): claims and completes every due job of these types
sub drain
{
	my ($types) = @_;
	$node->safe_psql(
		'postgres', qq{
DO \$\$
DECLARE
    ids uuid[];
    tokens uuid[];
    outputs jsonb[];
BEGIN
    LOOP
        SELECT array_agg(c.id ORDER BY c.id), array_agg(c.lease_token ORDER BY c.id),
               array_agg(jsonb_build_object('part', c.id) ORDER BY c.id)
          INTO ids, tokens, outputs
          FROM workflow.claim('tap-drain', ARRAY[$types], 500) c;
        EXIT WHEN ids IS NULL;
        PERFORM workflow.complete_jobs(ids, tokens, outputs);
        COMMIT;
    END LOOP;
END
\$\$});
}

drain("'tap.draft', 'tap.part'");
my ($job, $token) = split /\|/, $node->safe_psql('postgres',
	"SELECT id, lease_token FROM workflow.claim('tap-worker', ARRAY['tap.review'])"
);
ok($job && $token, 'generation 0 ran up to the review, which is claimed');

# ---- the pause: a test-only trigger that sleeps once mid-reset -------------

$node->safe_psql(
	'postgres', qq{
CREATE SEQUENCE public.tap_resets;
CREATE FUNCTION public.tap_pause_once() RETURNS trigger
LANGUAGE plpgsql AS \$\$
BEGIN
    IF nextval('public.tap_resets') = $PAUSE_AT THEN
        PERFORM pg_sleep(3600);
    END IF;
    RETURN NEW;
END
\$\$;
CREATE TRIGGER tap_pause_once BEFORE UPDATE ON workflow.workflow_steps
    FOR EACH ROW WHEN (OLD.generation = 0 AND NEW.generation = 1
                       AND NEW.execution_kind::text = 'JOB')
    EXECUTE FUNCTION public.tap_pause_once();
});

my $bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_until(qr/started/,
	"\\echo started\nSELECT workflow.complete_job('$job', '$token', '{\"approved\": false}');\n"
);
ok( $node->poll_query_until(
		'postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE wait_event = 'PgSleep' AND query LIKE '%complete_job%'}),
	'complete_job is paused inside the body reset');
my $pid = $node->safe_psql(
	'postgres', q{
SELECT pid FROM pg_stat_activity
 WHERE wait_event = 'PgSleep' AND query LIKE '%complete_job%'});
is($node->safe_psql('postgres', 'SELECT last_value FROM public.tap_resets'),
	$PAUSE_AT, "the reset is paused at body row $PAUSE_AT of $BODY");

# ---- the crash ------------------------------------------------------------

my $log_offset = -s $node->logfile;
ok(kill('KILL', $pid), "backend $pid killed with SIGKILL");
$node->wait_for_log(qr/all server processes terminated; reinitializing/,
	$log_offset);
ok($node->poll_query_until('postgres', 'SELECT 1', '1'),
	'the server accepts connections after crash recovery');
eval { $bg->{run}->finish; };
unlike($bg->{stdout}, qr/^\s*\S/m, 'complete_job returned nothing');

$node->safe_psql(
	'postgres', q{
DROP TRIGGER tap_pause_once ON workflow.workflow_steps;
DROP FUNCTION public.tap_pause_once();
DROP SEQUENCE public.tap_resets;
});

# ---- nothing of the reset is visible ---------------------------------------

is( $node->safe_psql(
		'postgres', qq{
SELECT string_agg(DISTINCT status || ' ' || generation, ',')
  FROM workflow.workflow_steps
 WHERE workflow_run_id = '$run' AND step_key NOT IN ('review', 'again')}),
	'SUCCEEDED 0',
	'the body before the review is SUCCEEDED at generation 0');
is( $node->safe_psql(
		'postgres', qq{
SELECT s.status || ' ' || s.generation || ' ' || j.status || ' ' || (j.lease_token = '$token')
  FROM workflow.workflow_steps s JOIN workflow.job_queue j ON j.id = s.job_id
 WHERE s.workflow_run_id = '$run' AND s.step_key = 'review'}),
	'RUNNING 0 RUNNING true',
	'the review is RUNNING at generation 0 under the dead session\'s lease');
is( $node->safe_psql(
		'postgres', qq{
SELECT status || ' ' || generation || ' ' || dependency_count_pending
  FROM workflow.workflow_steps WHERE workflow_run_id = '$run' AND step_key = 'again'}),
	'BLOCKED 0 1',
	'the repeat still waits for generation 0');
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) || ' ' || count(*) FILTER (WHERE generation = 0)
  FROM workflow.job_queue WHERE workflow_run_id = '$run'}),
	($BODY) . ' ' . ($BODY),
	'no job of generation 1 exists');
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FROM workflow.workflow_events
 WHERE workflow_run_id = '$run' AND event_type IN ('control_node_settled', 'step_reset')}),
	'0',
	'no settlement and no reset was recorded');
verify_is_clean($node, 'after crash recovery');

# ---- the loop goes on from the same generation -----------------------------

ok($node->poll_query_until('postgres', 'SELECT workflow.reap_expired() = 1'),
	'reap_expired expires the review\'s lease');
my ($job2, $token2) = split /\|/, $node->safe_psql('postgres',
	"SELECT id, lease_token FROM workflow.claim('tap-worker-2', ARRAY['tap.review'])"
);
is($job2, $job, 'the review of generation 0 is claimed again');
$node->safe_psql('postgres',
	"SELECT workflow.complete_job('$job2', '$token2', '{\"approved\": false}')");
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FILTER (WHERE generation = 1 AND status = 'BLOCKED')
       || ' ' || count(*) FILTER (WHERE step_key = 'draft' AND generation = 1
                                   AND status = 'ENQUEUED')
  FROM workflow.workflow_steps WHERE workflow_run_id = '$run'}),
	($BODY) . ' 1',
	'generation 1: the draft is released, the rest of the body and the repeat wait');
is( $node->safe_psql(
		'postgres', qq{
SELECT string_agg(e.detail ->> 'decision' || ' ' || (e.detail ->> 'generation'), ',' ORDER BY e.id)
  FROM workflow.workflow_events e
 WHERE e.workflow_run_id = '$run' AND e.event_type = 'control_node_settled'}),
	'iterate 0',
	'one settlement: generation 0 went round');
verify_is_clean($node, 'in generation 1');

drain("'tap.draft', 'tap.part'");
my ($job3, $token3) = split /\|/, $node->safe_psql('postgres',
	"SELECT id, lease_token FROM workflow.claim('tap-worker-2', ARRAY['tap.review'])"
);
$node->safe_psql('postgres',
	"SELECT workflow.complete_job('$job3', '$token3', '{\"approved\": true}')");
is( $node->safe_psql(
		'postgres', qq{
SELECT r.status || ' ' || s.status || ' ' || s.generation || ' ' || s.output::text
  FROM workflow.workflow_runs r
  JOIN workflow.workflow_steps s ON s.workflow_run_id = r.id AND s.step_key = 'again'
 WHERE r.id = '$run'}),
	'SUCCEEDED SUCCEEDED 1 {"approved": true}',
	'the loop cleared at generation 1 and the run SUCCEEDED');
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FROM (
    SELECT workflow_step_id, generation FROM workflow.job_queue
     WHERE workflow_run_id = '$run'
     GROUP BY workflow_step_id, generation HAVING count(*) > 1) d}),
	'0',
	'one job per step and generation');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM workflow.job_queue WHERE workflow_run_id = '$run'"),
	2 * $BODY,
	'two generations of the body\'s jobs');
verify_is_clean($node, 'at the end');

$node->stop;
done_testing();
