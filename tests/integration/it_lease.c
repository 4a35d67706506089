/* SPDX-License-Identifier: MIT */
/*
 * Loans and pins are leases. An agent stopped (SIGSTOP, as a debugger
 * does) while it holds most of the send pool, or pins in the recv pool,
 * is fenced once its lease (--loan-timeout, --recv-ttl) is over: killed,
 * its slots back, the other agents' requests complete. Without a lease the
 * same stop holds the slots for as long as it lasts. A loan whose
 * descriptor names no attached agent is freed, and nobody is fenced for it.
 * The same rules hold for agents in pid namespaces of their own (as in
 * containers), whose pids in the pool are not the broker's.
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "it_fixture.h"
#include "it_shmmap.h"
#include "pd_shm_layout.h"
#include "pd_slots.h"

#define HOG 14u /* of 16 send slots */

static pid_t hog_pid; /* killed by the teardown: a failed test must not leave it stopped */

static int kill_hog(void **state)
{
	(void)state;
	if (hog_pid > 0) {
		(void)kill(hog_pid, SIGKILL);
		(void)waitpid(hog_pid, NULL, 0);
	}
	hog_pid = 0;
	return 0;
}

struct hog {
	struct it *t;
	int fd;          /* write "1" once holding */
	const char *req; /* recv: the request to pin */
	int scribble;    /* send: make the loans' descriptors name nobody */
	int lock;        /* 1: stop holding the send pool's mutex; 2: garbage over it;
			  * 3: make it look held by a thread that does not exist;
			  * 4: as 1, once a byte comes on go (ready once attached) */
	int go;
	int wait;        /* send: hold the loans running (until killed), not stopped */
	unsigned hold_ms; /* recv: hold the pins this long running, then exit (0: stop) */
	int pidns;       /* 1: run in a pid namespace of its own ... */
	unsigned burn;   /* ... as pid 2 + burn there */
	uint32_t want;   /* hog_wants: slots to wait for, within hold_ms */
};

static int ready(const struct hog *h)
{
	return write(h->fd, "1", 1) == 1 ? 0 : 1;
}

/* This process's view of the send pool of h's prefill broker. */
static struct pd_pool_shm *send_pool(struct hog *h)
{
	uint8_t *base = it_mapped_segment(&h->t->p);
	const struct pd_shm_hdr *hdr = (const void *)base;

	return base ? (void *)(base + hdr->regions[PD_REGION_SEND_POOL].off) : NULL;
}

/* The loans' descriptors, as this process can write them. */
static void name_nobody(struct hog *h, const pd_slot_ref *r, uint32_t n)
{
	struct pd_pool_shm *pool = send_pool(h);
	struct pd_slot_desc *d = pool ? (void *)((uint8_t *)pool + pool->desc_off) : NULL;

	for (uint32_t i = 0; d && i < n; i++) {
		d[PD_SLOT_REF_IDX(r[i])].owner = 77;
		d[PD_SLOT_REF_IDX(r[i])].pid = 1;
	}
}

/* A thread id no thread has now: a child's, reaped. */
static int32_t gone_tid(void)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(0);
	(void)waitpid(pid, NULL, 0);
	return (int32_t)pid;
}

/* Child: take the send pool's mutex and stop (1), write over it (2), or
 * write a lock word naming a thread that does not exist (3: no owner-died
 * flag, so only the broker's look at /proc can tell). */
static int hog_lock(void *arg)
{
	struct hog *h = arg;
	struct pd_agent *a = NULL;
	struct pd_pool_shm *s;
	struct pd_pool p;

	if (pd_test_agent_attach(&h->t->p, PD_AGENT_SEND, &a) < 0 || !(s = send_pool(h)))
		return 2;
	if (h->lock == 4 && (ready(h) || read(h->go, &(char){ 0 }, 1) != 1))
		return 5;
	if (h->lock == 3) {
		int32_t tid = gone_tid();

		__atomic_store_n(&s->lock.m.__data.__owner, tid, __ATOMIC_RELAXED);
		__atomic_store_n(&s->lock.m.__data.__lock, tid, __ATOMIC_RELEASE);
	} else if (h->lock == 2) {
		memset(&s->lock, 0xa5, sizeof(s->lock));
	} else if (pd_pool_open(&p, s, sizeof(*s) + 64 * 1024, NULL, 0) < 0 ||
		   pd_pool_lock(&p, 0, pd_deadline_ms(1000)) < 0) {
		return 3;
	}
	if (h->lock != 4 && ready(h))
		return 4;
	if (h->lock == 2 || h->lock == 3)
		(void)pause();
	else
		(void)raise(SIGSTOP);
	return 0;
}

/* Child: loan HOG send slots, then stop (or, scribbling, wait to be killed). */
static int hog_loans(void *arg)
{
	struct hog *h = arg;
	struct pd_agent *a = NULL;
	pd_slot_ref r[HOG];

	if (pd_test_agent_attach(&h->t->p, PD_AGENT_SEND, &a) < 0 ||
	    it_declare_on(h->t, a, "hog", HOG) < 0 || it_wait_admission(a, "hog") != PD_REQ_ADMITTED ||
	    pd_alloc(a, "hog", HOG, r, IT_WAIT_MS) != 0)
		return 2;
	if (h->scribble)
		name_nobody(h, r, HOG);
	if (ready(h))
		return 3;
	if (h->scribble || h->wait)
		(void)pause();
	else
		(void)raise(SIGSTOP);
	return 0;
}

/* Child: pin every chunk of h->req at the decode broker, then stop. */
static int hog_pins(void *arg)
{
	struct hog *h = arg;
	struct pd_agent *a = NULL;
	struct pd_recv_info info;

	if (pd_test_agent_attach(&h->t->d, PD_AGENT_RECV, &a) < 0 ||
	    pd_recv_wait(a, h->req, IT_WAIT_MS, &info) < 0 || info.status != 0)
		return 2;
	for (uint32_t i = 0; i < info.chunks; i++) {
		const void *p;
		uint32_t len;
		char key[48];

		it_key(key, sizeof(key), h->req, i);
		if (pd_recv_lookup(a, key, (uint32_t)strlen(key), &p, &len) < 0)
			return 3;
	}
	if (ready(h))
		return 4;
	if (h->hold_ms)
		(void)usleep(h->hold_ms * 1000u);
	else
		(void)raise(SIGSTOP);
	return 0;
}

/* Child: wait in pd_alloc() for h->want slots of request h->req at most
 * h->hold_ms. 0 got them, 10 timed out. */
static int hog_wants(void *arg)
{
	struct hog *h = arg;
	struct pd_agent *a = NULL;
	pd_slot_ref r[16];
	int rc;

	if (h->want > 16 || pd_test_agent_attach(&h->t->p, PD_AGENT_SEND, &a) < 0 ||
	    it_declare_on(h->t, a, h->req, h->want) < 0 ||
	    it_wait_admission(a, h->req) != PD_REQ_ADMITTED || ready(h))
		return 2;
	rc = pd_alloc(a, h->req, h->want, r, h->hold_ms);
	return rc == 0 ? 0 : rc == -ETIMEDOUT ? 10 : 11;
}

/* How the hog ended (reaped: the teardown leaves it alone). */
static int wait_hog(pid_t pid)
{
	int st = pd_test_wait(pid, IT_WAIT_MS);

	hog_pid = 0;
	return st;
}

/* Fork fn with a pipe for its word; return once it holds what it holds. */
static pid_t start_hog(struct hog *h, int (*fn)(void *))
{
	int fds[2];
	pid_t pid;
	char c;

	assert_int_equal(pipe(fds), 0);
	h->fd = fds[1];
	pid = h->pidns ? pd_test_fork_pidns(fn, h, h->burn) : pd_test_fork(fn, h);
	assert_true(pid > 0);
	hog_pid = pid;
	(void)close(fds[1]);
	assert_int_equal(read(fds[0], &c, 1), 1);
	(void)close(fds[0]);
	return pid;
}

static void put_and_verify(struct it *t, const char *req)
{
	assert_int_equal(it_put(t, req, 0, 4, 4), 0);
	it_expect_event(t, req, PD_EV_PUT_DONE);
	it_verify(t, req, 4);
	assert_int_equal(pd_recv_release(t->da, req), 0);
}

static void test_stopped_loaner_is_fenced(void **state)
{
	static const char *const lease[] = { "--loan-timeout", "1s", NULL };
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 64,
							.p_extra = lease });
	struct hog h = { .t = t };
	pid_t pid = start_hog(&h, hog_loans);

	(void)state;
	assert_int_equal(it_free_slots(&t->p, 0), 16 - HOG);
	put_and_verify(t, "A"); /* its 4 slots come with the fence */
	assert_int_equal(wait_hog(pid), 128 + SIGKILL);
	assert_int_equal(it_wait_stat(&t->p, "agents.fenced", 1), 1);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	assert_int_equal(it_wait_free(&t->d, 1, 64), 64); /* its request's reservation too */
	put_and_verify(t, "B");
	it_stop(t, 0);
}

/* The same stop with --loan-timeout 0: the slots stay held. */
static void test_without_a_lease_the_stop_holds(void **state)
{
	static const char *const none[] = { "--loan-timeout", "0", NULL };
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 64,
							.p_extra = none });
	struct hog h = { .t = t };
	pid_t pid = start_hog(&h, hog_loans);
	pd_slot_ref r[4];
	int rc;

	(void)state;
	assert_int_equal(it_declare_on(t, t->pa, "A", 4), 0);
	assert_int_equal(it_wait_admission(t->pa, "A"), PD_REQ_ADMITTED);
	rc = pd_alloc(t->pa, "A", 4, r, 2500);
	(void)kill(pid, SIGKILL); /* before asserting: a failure must not leave it */
	assert_int_equal(rc, -ETIMEDOUT);
	assert_int_equal(wait_hog(pid), 128 + SIGKILL);
	assert_int_equal(it_stat(&t->p, "agents.fenced"), 0);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	assert_int_equal(pd_cancel(t->pa, "A"), 0);
	it_stop(t, 0);
}

/* A decode agent stopped while pinning a request: fenced after --recv-ttl. */
static void test_stopped_pinner_is_fenced(void **state)
{
	static const char *const ttl[] = { "--recv-ttl", "2s", NULL };
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 16,
							.d_extra = ttl });
	struct hog h = { .t = t, .req = "P" };
	pid_t pid;

	(void)state;
	assert_int_equal(it_put(t, "P", 0, 4, 4), 0);
	it_expect_event(t, "P", PD_EV_PUT_DONE);
	pid = start_hog(&h, hog_pins);
	assert_int_equal(wait_hog(pid), 128 + SIGKILL);
	assert_int_equal(it_wait_stat(&t->d, "agents.fenced", 1), 1);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	put_and_verify(t, "Q");
	it_stop(t, 0);
}

/*
 * The next agent in a slot starts with fresh pin clocks: an agent holds
 * its pins for most of --recv-ttl and exits; another attaches in its slot
 * and pins the same chunks (the same journal records), stopped. Its own
 * lease starts at its pins: it is not fenced for the time the first one
 * held them, and is once its own lease is over.
 */
static void test_next_agent_in_a_slot_has_its_own_pin_lease(void **state)
{
	static const char *const ttl[] = { "--recv-ttl", "3s", NULL };
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 16,
							.d_extra = ttl });
	struct hog h = { .t = t, .req = "P", .hold_ms = 1800 };
	pid_t pid;

	(void)state;
	assert_int_equal(it_put(t, "P", 0, 4, 4), 0);
	it_expect_event(t, "P", PD_EV_PUT_DONE);
	assert_int_equal(wait_hog(start_hog(&h, hog_pins)), 0);
	(void)usleep(400 * 1000); /* a lease look or more with the slot empty */
	h.hold_ms = 0;
	pid = start_hog(&h, hog_pins);
	(void)usleep(1600 * 1000); /* 3.8 s since the first pins, 1.6 s since these */
	assert_int_equal(it_stat(&t->d, "agents.fenced"), 0);
	assert_int_equal(wait_hog(pid), 128 + SIGKILL);
	assert_int_equal(it_stat(&t->d, "agents.fenced"), 1);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	put_and_verify(t, "Q");
	it_stop(t, 0);
}

/* Send descriptors written into no state at all are made free again by
 * the broker's look (counted), and a request can use every slot. */
static void test_descriptors_in_no_state_are_scrubbed(void **state)
{
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 16 });
	struct hog h = { .t = t };
	struct pd_pool_shm *pool = send_pool(&h);
	struct pd_slot_desc *d = pool ? (void *)((uint8_t *)pool + pool->desc_off) : NULL;

	(void)state;
	assert_non_null(d);
	for (uint32_t i = 3; i < 7; i++)
		atomic_store_explicit(&d[i].state, 0x77u, memory_order_relaxed);
	assert_int_equal(it_wait_stat(&t->p, "pool.send.descs_scrubbed", 4), 4);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	assert_int_equal(it_put(t, "S", 0, 16, 16), 0);
	it_expect_event(t, "S", PD_EV_PUT_DONE);
	it_verify(t, "S", 16);
	assert_int_equal(pd_recv_release(t->da, "S"), 0);
	it_stop(t, 0);
}

/* Loans whose descriptors name an agent that is not attached: freed after
 * the lease, and the process that wrote them is not taken for their owner. */
static void test_loans_naming_nobody_are_freed(void **state)
{
	static const char *const lease[] = { "--loan-timeout", "1s", NULL };
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 64,
							.p_extra = lease });
	struct hog h = { .t = t, .scribble = 1 };
	pid_t pid = start_hog(&h, hog_loans);
	uint64_t orphaned = it_wait_stat(&t->p, "pool.send.loans_orphaned", HOG);
	uint32_t free_now = it_wait_free(&t->p, 0, 16);
	int alive = kill(pid, 0) == 0;

	(void)state;
	(void)kill(pid, SIGKILL);
	assert_int_equal(wait_hog(pid), 128 + SIGKILL);
	assert_int_equal(orphaned, HOG);
	assert_int_equal(free_now, 16);
	assert_true(alive);
	assert_int_equal(it_stat(&t->p, "agents.fenced"), 0);
	put_and_verify(t, "A");
	it_stop(t, 0);
}

/* An agent that reads none of its events costs the broker a bounded queue:
 * what does not fit is dropped and counted, and the others are served. */
static void test_unread_completions_are_capped(void **state)
{
	struct it *t = it_start(16, 64);
	struct pd_agent *deaf = it_attach(&t->p, PD_AGENT_SEND);
	uint64_t queued, dropped;
	char req[32];

	(void)state;
	for (uint32_t i = 0; i < 6000; i++) {
		struct pd_decl d = { .req_id = req, .endpoint = t->d.ctrl, .world_size = 1 };
		uint64_t deadline = pd_deadline_ms(IT_WAIT_MS);
		int rc;

		(void)snprintf(req, sizeof(req), "deaf%u", i);
		while ((rc = pd_declare(deaf, &d)) == -EAGAIN && pd_now_ns() < deadline)
			(void)nanosleep(&(struct timespec){ 0, 1000 * 1000 }, NULL);
		assert_int_equal(rc, 0);
	}
	dropped = it_wait_stat(&t->p, "agents.cq_dropped", 1);
	queued = it_stat(&t->p, "agents.cq_queued");
	(void)fprintf(stderr, "unread completions: %llu queued, %llu dropped\n", (unsigned long long)queued,
		     (unsigned long long)dropped);
	assert_true(dropped != UINT64_MAX && dropped > 0);
	assert_true(queued <= 4096);
	put_and_verify(t, "A");
	pd_agent_detach(deaf);
	it_stop(t, 0);
}

/* A stopped agent holding the send pool's mutex is fenced; the mutex
 * repairs itself at the next lock and the others allocate again. */
static void test_stopped_lock_holder_is_fenced(void **state)
{
	struct it *t = it_start(16, 64);
	struct hog h = { .t = t, .lock = 1 };
	pid_t pid = start_hog(&h, hog_lock);

	(void)state;
	put_and_verify(t, "A");
	assert_int_equal(wait_hog(pid), 128 + SIGKILL);
	assert_int_equal(it_wait_stat(&t->p, "agents.fenced", 1), 1);
	assert_int_equal(it_stat(&t->p, "pool.send.lock_resets"), 0);
	put_and_verify(t, "B");
	it_stop(t, 0);
}

/* An agent that dies while another, stopped, holds the send pool's mutex:
 * its loans cannot come back at its detach (the broker does not wait on the
 * mutex more than once), so they come back once the holder is fenced, with
 * no loan lease to free them otherwise (--loan-timeout 0). */
static void test_loans_of_an_agent_dying_behind_a_held_lock_come_back(void **state)
{
	static const char *const extra[] = { "--loan-timeout", "0", NULL };
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 64,
							.p_extra = extra });
	struct hog loaner = { .t = t, .wait = 1 }, holder = { .t = t, .lock = 1 };
	pid_t lpid = start_hog(&loaner, hog_loans), hpid;

	(void)state;
	hog_pid = 0; /* the loaner is reaped here, the holder by the teardown */
	hpid = start_hog(&holder, hog_lock);
	assert_int_equal(it_free_slots(&t->p, 0), 16 - HOG);
	assert_int_equal(kill(lpid, SIGKILL), 0);
	assert_int_equal(pd_test_wait(lpid, IT_WAIT_MS), 128 + SIGKILL);
	assert_int_equal(wait_hog(hpid), 128 + SIGKILL); /* the holder, fenced */
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	put_and_verify(t, "A");
	it_stop(t, 0);
}

/* A PUT the broker cannot take because a stopped agent holds the send
 * pool's mutex: the request fails -ETIMEDOUT and its slots come back once
 * the holder is fenced (they stay loaned to an agent that let go of them
 * otherwise, until its own lease fences it). */
static void test_put_behind_a_held_lock_fails_and_frees_its_slots(void **state)
{
	static const char *const extra[] = { "--loan-timeout", "0", NULL };
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 64,
							.p_extra = extra });
	struct hog h = { .t = t, .lock = 1 };
	struct pd_chunk c[4];
	struct pd_batch b = { .req_id = "P", .endpoint = t->d.ctrl, .chunks = c, .n = 4,
			      .total_chunks = 4, .world_size = 1, .last = 1 };
	pd_slot_ref r[4];
	pid_t hpid;

	(void)state;
	assert_int_equal(it_declare_on(t, t->pa, "P", 4), 0);
	assert_int_equal(it_wait_admission(t->pa, "P"), PD_REQ_ADMITTED);
	assert_int_equal(pd_alloc(t->pa, "P", 4, r, IT_WAIT_MS), 0);
	for (uint32_t i = 0; i < 4; i++)
		c[i] = (struct pd_chunk){ .slot = r[i], .len = 8, .klen = 3, .key = "P/k" };
	hpid = start_hog(&h, hog_lock);
	assert_int_equal(pd_put(t->pa, &b), 0);
	assert_int_equal(it_expect_event_from(t->pa, "P", PD_EV_PUT_FAILED), -ETIMEDOUT);
	assert_int_equal(wait_hog(hpid), 128 + SIGKILL); /* the holder, fenced */
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	put_and_verify(t, "A");
	it_stop(t, 0);
}

/*
 * A request whose writes complete while a stopped agent holds the send
 * pool's mutex: the broker cannot free its staging then (the lock does
 * not come), so the free waits for the next lease look after the holder
 * is fenced, and every slot comes back. The decode broker is stopped for
 * a moment, so the holder takes the mutex after the prefill broker took
 * the request's slots and before the writes are acknowledged.
 */
static void test_staging_freed_behind_a_held_lock_comes_back_later(void **state)
{
	static const char *const extra[] = { "--loan-timeout", "0", NULL };
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 64,
							.p_extra = extra });
	struct hog h = { .t = t, .lock = 4 };
	int go[2];
	pid_t hpid;

	(void)state;
	assert_int_equal(pipe(go), 0);
	h.go = go[0];
	hpid = start_hog(&h, hog_lock);
	assert_int_equal(it_declare_on(t, t->pa, "A", 4), 0);
	assert_int_equal(it_wait_admission(t->pa, "A"), PD_REQ_ADMITTED);
	assert_int_equal(kill(t->d.pid, SIGSTOP), 0);
	assert_int_equal(it_stage(t, t->pa, "A", 0, 4, 4, IT_WAIT_MS), 0);
	(void)usleep(200 * 1000); /* the writes are out, their acks not */
	assert_int_equal(write(go[1], "1", 1), 1);
	(void)usleep(200 * 1000);
	assert_int_equal(kill(t->d.pid, SIGCONT), 0);
	(void)close(go[0]);
	(void)close(go[1]);
	it_expect_event(t, "A", PD_EV_PUT_DONE);
	assert_int_equal(wait_hog(hpid), 128 + SIGKILL); /* the holder, fenced */
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	assert_int_equal(pd_test_broker_log_has(&t->p, "staging slots not freed yet"), 1);
	it_verify(t, "A", 4);
	assert_int_equal(pd_recv_release(t->da, "A"), 0);
	it_stop(t, 0);
}

/* The send pool's mutex "held" by a thread that does not exist, with no
 * owner-died flag for the kernel to set: the broker sees the holder is
 * not alive (/proc) and makes it new; nobody is fenced. */
static void test_lock_held_by_no_thread_is_reset(void **state)
{
	struct it *t = it_start(16, 64);
	struct hog h = { .t = t, .lock = 3 };

	(void)state;
	(void)start_hog(&h, hog_lock);
	put_and_verify(t, "A");
	assert_true(it_wait_stat(&t->p, "pool.send.lock_resets", 1) >= 1);
	assert_int_equal(it_stat(&t->p, "agents.fenced"), 0);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	put_and_verify(t, "B");
	it_stop(t, 0);
}

/* Bytes written over the send pool's mutex: the broker makes it new. */
static void test_garbage_over_the_pool_lock_is_reset(void **state)
{
	struct it *t = it_start(16, 64);
	struct hog h = { .t = t, .lock = 2 };

	(void)state;
	(void)start_hog(&h, hog_lock);
	put_and_verify(t, "A");
	assert_int_equal(it_wait_stat(&t->p, "pool.send.lock_resets", 1), 1);
	assert_int_equal(it_stat(&t->p, "agents.fenced"), 0);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	put_and_verify(t, "B");
	it_stop(t, 0);
}

/* A stopped loaner in a pid namespace of its own (its pool records say pid
 * 2): fenced and killed, not robbed of loans it can still write. */
static void test_stopped_loaner_in_another_pid_namespace_is_fenced(void **state)
{
	static const char *const lease[] = { "--loan-timeout", "1s", NULL };
	struct it *t;
	struct hog h = { .pidns = 1 };
	pid_t pid;

	(void)state;
	if (!pd_test_pidns_ok())
		skip();
	t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 64, .p_extra = lease });
	h.t = t;
	pid = start_hog(&h, hog_loans);
	assert_int_equal(it_free_slots(&t->p, 0), 16 - HOG);
	assert_int_equal(wait_hog(pid), 128 + SIGKILL);
	assert_int_equal(it_wait_stat(&t->p, "agents.fenced", 1), 1);
	assert_int_equal(it_stat(&t->p, "pool.send.loans_orphaned"), 0);
	assert_true(pd_test_broker_log_has(&t->p, ", 2 in its own pid namespace, rank 0)"));
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	put_and_verify(t, "A");
	it_stop(t, 0);
}

/* A high pid no process has here: a hog's in its own namespace, so that the
 * broker's /proc has no thread of that id. */
static unsigned free_host_pid(void)
{
	for (int p = (int)pd_test_read_num("/proc/sys/kernel/pid_max", 32768) - 2; p > 1000; p--)
		if (kill(p, 0) < 0 && errno == ESRCH)
			return (unsigned)p;
	return 0;
}

/* The same for the holder of the send pool's mutex: fenced, the mutex not
 * made new under it, also by the broker's own short waits for it (to
 * reclaim the loans of an agent killed meanwhile). Its thread id there is
 * one no thread has in the broker's namespace, so the lock word cannot be
 * checked from there. */
static void test_stopped_lock_holder_in_another_pid_namespace_is_fenced(void **state)
{
	struct it *t;
	unsigned host = free_host_pid();
	struct hog h = { .lock = 1, .pidns = 1, .burn = host - 2 }; /* its pid there: host */
	struct hog loaner = { .wait = 1 };
	pid_t pid, lpid;

	(void)state;
	if (!pd_test_pidns_ok() || !host)
		skip();
	t = it_start(16, 64);
	h.t = loaner.t = t;
	lpid = start_hog(&loaner, hog_loans);
	hog_pid = 0; /* the loaner is reaped here, the holder by the teardown */
	pid = start_hog(&h, hog_lock);
	assert_int_equal(kill(lpid, SIGKILL), 0);
	assert_int_equal(pd_test_wait(lpid, IT_WAIT_MS), 128 + SIGKILL);
	assert_int_equal(wait_hog(pid), 128 + SIGKILL);
	assert_int_equal(it_wait_stat(&t->p, "agents.fenced", 1), 1);
	assert_int_equal(it_stat(&t->p, "pool.send.lock_resets"), 0);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	put_and_verify(t, "B");
	it_stop(t, 0);
}

/* A waiter in one pid namespace (pid 2 there) keeps its place in the FIFO
 * against an agent of another, where pid 2 is gone: it is not taken for
 * dead and dropped, so the smaller request behind it waits. */
static void test_waiter_of_another_pid_namespace_keeps_its_place(void **state)
{
	struct it *t;
	struct hog big = { .pidns = 1, .req = "big", .want = 8, .hold_ms = IT_WAIT_MS };
	struct hog small = { .pidns = 1, .burn = 1, .req = "small", .want = 4, .hold_ms = 1000 };
	struct pd_pool_shm *pool;
	pd_slot_ref r[10];
	pid_t bpid, spid;

	(void)state;
	if (!pd_test_pidns_ok())
		skip();
	t = it_start(16, 64);
	big.t = small.t = t;
	assert_int_equal(it_declare_on(t, t->pa, "mine", 10), 0);
	assert_int_equal(it_wait_admission(t->pa, "mine"), PD_REQ_ADMITTED);
	assert_int_equal(pd_alloc(t->pa, "mine", 10, r, IT_WAIT_MS), 0);
	bpid = start_hog(&big, hog_wants);
	hog_pid = 0; /* reaped here */
	pool = send_pool(&big);
	assert_non_null(pool);
	for (uint64_t end = pd_deadline_ms(IT_WAIT_MS);
	     __atomic_load_n(&pool->nwaiters, __ATOMIC_ACQUIRE) != 1 && pd_now_ns() < end;)
		(void)usleep(1000);
	assert_int_equal(pool->nwaiters, 1);
	spid = start_hog(&small, hog_wants);
	assert_int_equal(wait_hog(spid), 10); /* behind the big one, not before it */
	assert_int_equal(pd_slot_release(t->pa, r, 10), 0);
	assert_int_equal(pd_test_wait(bpid, IT_WAIT_MS), 0);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	it_stop(t, 0);
}

/* Two agents in pid namespaces of their own with one thread id (2, each
 * its namespace's first process): while one holds the send pool's mutex,
 * the other waits for it as for anyone's and times out (a mutex's owner is
 * a thread id, which is not unique across namespaces: not EDEADLK), and its
 * exit after that does not make the kernel take the holder for dead (the
 * holder is fenced for holding it, not "repaired" under). */
static void test_same_thread_id_in_two_pid_namespaces_waits(void **state)
{
	struct it *t;
	struct hog holder = { .lock = 1, .pidns = 1 };
	struct hog other = { .pidns = 1, .req = "other", .want = 1, .hold_ms = 1000 };
	pid_t hpid;

	(void)state;
	if (!pd_test_pidns_ok())
		skip();
	t = it_start(16, 64);
	holder.t = other.t = t;
	hpid = start_hog(&holder, hog_lock);
	hog_pid = 0; /* reaped here */
	assert_int_equal(wait_hog(start_hog(&other, hog_wants)), 10); /* timed out */
	assert_int_equal(pd_test_wait(hpid, IT_WAIT_MS), 128 + SIGKILL); /* fenced */
	put_and_verify(t, "A");
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_stopped_loaner_is_fenced, kill_hog),
		cmocka_unit_test_teardown(test_without_a_lease_the_stop_holds, kill_hog),
		cmocka_unit_test_teardown(test_stopped_pinner_is_fenced, kill_hog),
		cmocka_unit_test_teardown(test_next_agent_in_a_slot_has_its_own_pin_lease, kill_hog),
		cmocka_unit_test_teardown(test_loans_naming_nobody_are_freed, kill_hog),
		cmocka_unit_test(test_descriptors_in_no_state_are_scrubbed),
		cmocka_unit_test(test_unread_completions_are_capped),
		cmocka_unit_test_teardown(test_stopped_lock_holder_is_fenced, kill_hog),
		cmocka_unit_test_teardown(test_loans_of_an_agent_dying_behind_a_held_lock_come_back,
					  kill_hog),
		cmocka_unit_test_teardown(test_garbage_over_the_pool_lock_is_reset, kill_hog),
		cmocka_unit_test_teardown(test_lock_held_by_no_thread_is_reset, kill_hog),
		cmocka_unit_test_teardown(test_staging_freed_behind_a_held_lock_comes_back_later,
					  kill_hog),
		cmocka_unit_test_teardown(test_put_behind_a_held_lock_fails_and_frees_its_slots,
					  kill_hog),
		cmocka_unit_test_teardown(test_stopped_loaner_in_another_pid_namespace_is_fenced,
					  kill_hog),
		cmocka_unit_test_teardown(test_stopped_lock_holder_in_another_pid_namespace_is_fenced,
					  kill_hog),
		cmocka_unit_test_teardown(test_waiter_of_another_pid_namespace_keeps_its_place,
					  kill_hog),
		cmocka_unit_test_teardown(test_same_thread_id_in_two_pid_namespaces_waits, kill_hog),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
