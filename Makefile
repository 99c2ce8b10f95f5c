# PGXS build of the workflow extension.

EXTENSION = workflow
MODULE_big = workflow
DATA = workflow--1.0.sql workflow--1.6.sql workflow--1.7.sql workflow--1.9.sql workflow--1.12.sql workflow--1.0--1.1.sql workflow--1.1--1.2.sql \
	workflow--1.2--1.3.sql workflow--1.3--1.4.sql workflow--1.4--1.5.sql \
	workflow--1.5--1.6.sql workflow--1.6--1.7.sql workflow--1.7--1.8.sql \
	workflow--1.8--1.9.sql workflow--1.9--1.10.sql \
	workflow--1.10--1.11.sql \
	workflow--1.11--1.12.sql
OBJS = \
	src/workflow.o \
	src/xact_state.o \
	src/locks.o \
	src/spi_util.o \
	src/uuid.o \
	src/queue.o \
	src/claim.o \
	src/notify.o \
	src/batch.o \
	src/definition.o \
	src/repeat_def.o \
	src/run.o \
	src/registry.o \
	src/inputs.o \
	src/cascade.o \
	src/pins.o \
	src/run_jobs.o \
	src/admission.o \
	src/allowance.o \
	src/deadlines.o \
	src/compensation.o \
	src/waits.o \
	src/repeat.o \
	src/status.o \
	src/run_moves.o \
	src/external.o \
	src/events.o \
	src/timers.o \
	src/cancel.o \
	src/resume.o \
	src/retry.o \
	src/continuation.o \
	src/triggers.o \
	src/purge.o \
	src/history.o \
	src/run_history.o \
	src/graph.o \
	src/maintenance_status.o \
	src/maintenance_launcher.o \
	src/maintenance_worker.o \
	src/privilege.o

REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --inputdir=. --load-extension=workflow
ISOLATION = $(patsubst specs/%.spec,%,$(sort $(wildcard specs/*.spec)))
ISOLATION_OPTS = --load-extension=workflow
TAP_TESTS = 1

PG_CPPFLAGS = -I$(srcdir)/src
PG_CFLAGS = -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare \
	-Wno-missing-field-initializers $(WERROR)

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# workflow-worker (worker/): a libpq client program.  PGXS builds either a
# module or a program per Makefile, so the program has its own rules here.
WORKER = worker/workflow-worker
WORKER_OBJS = worker/main.o worker/options.o worker/loop.o worker/db.o \
	worker/command.o worker/json.o worker/util.o
WORKER_CFLAGS = -std=c99 -D_GNU_SOURCE -O2 -g -Wall -Wextra $(WERROR) \
	-I$(shell $(PG_CONFIG) --includedir)
WORKER_LDFLAGS = -L$(shell $(PG_CONFIG) --libdir)

all: $(WORKER)

worker/%.o: worker/%.c worker/worker.h
	$(CC) $(WORKER_CFLAGS) -c -o $@ $<

$(WORKER): $(WORKER_OBJS)
	$(CC) -o $@ $(WORKER_OBJS) $(WORKER_LDFLAGS) -lpq

install: install-worker
.PHONY: install-worker clean-worker
install-worker: $(WORKER)
	$(MKDIR_P) '$(DESTDIR)$(bindir)' '$(DESTDIR)$(mandir)/man1'
	$(INSTALL_PROGRAM) $(WORKER) '$(DESTDIR)$(bindir)/workflow-worker'
	$(INSTALL_DATA) worker/workflow-worker.1 '$(DESTDIR)$(mandir)/man1/workflow-worker.1'

clean: clean-worker
clean-worker:
	rm -f $(WORKER) $(WORKER_OBJS)

$(OBJS): src/workflow.h src/errors.h

.PHONY: test demo prove bench profile
# Every suite against throwaway clusters; ends with "N passed, N failed".
test:
	bash scripts/test.sh

# A project-local cluster running two real workflows with real workers.
demo:
	bash scripts/demo.sh

# The benchmark suite: its own cluster, ratios against pgbench -N.
bench:
	bash bench/run.sh

# perf profiles of claim + complete_job (plain jobs, one wide run).
profile:
	bash bench/profile.sh

# pgTAP contract tests against the cluster in PGHOST/PGPORT.
prove:
	pg_prove --verbose --ext .sql -r test/pgtap
