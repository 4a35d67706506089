/* SPDX-License-Identifier: MIT */
/*
 * --metrics-listen against real pdbroker processes, scraped with curl (raw
 * sockets where curl would not send what is tested): a bad address refused
 * at start naming the flag; the exposition well formed (pd_prom.h), the
 * same families, types and values as `pdctl metrics`, its counters and the
 * peer's rows moving after a request went through; 404, 405, HEAD and
 * malformed requests answered with an HTTP error and counted, exactly; a
 * client that trickles its request cut at its deadline (from the accept,
 * not from its last byte) while scrapes go on; connections that say
 * nothing, beyond the cap, neither block a scrape nor outlive their
 * deadline; a broker serving metrics idles without CPU, and does not spin
 * when accept() fails for want of descriptors.
 */
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "it_fixture.h"
#include "it_raw.h"
#include "pd_metrics_http.h"
#include "pd_prom.h"

#define IDLE_CONNS   48
#define FLOOD_CONNS  100
#define EVICTED      (IDLE_CONNS + FLOOD_CONNS - (int)PD_METRICS_MAX_CONNS) /* at least */
#define SCRAPE_MS    1000u   /* a scrape beside busy or idle connections takes less */
#define RAW_MAX      (256u << 10)
#define IDLE_CPU_MS  100u    /* of 2 s (5 % of a core): a loop spinning on a ready socket
			      * uses all of it */

static const char *const metrics_args[] = { "--metrics-listen", "127.0.0.1:0", NULL };
static const char *const lone_args[] = { "--send-slots", "8", "--recv-slots", "8",
					 "--slot-size", "64K", "--log-level", "info",
					 "--metrics-listen", "127.0.0.1:0", NULL };
static char curl_bin[256];

/* curl from PATH (tools/deps.sh installs it); 0 or -ENOENT. */
static int find_curl(void)
{
	const char *path = getenv("PATH");
	char dirs[4096];

	(void)snprintf(dirs, sizeof(dirs), "%s", path ? path : "/usr/bin:/bin");
	for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		(void)snprintf(curl_bin, sizeof(curl_bin), "%s/curl", d);
		if (access(curl_bin, X_OK) == 0)
			return 0;
	}
	return -ENOENT;
}

/* The port b serves metrics on, from its ready line (waited for). */
static int metrics_port(const struct pd_test_broker *b)
{
	uint64_t deadline = pd_deadline_ms(IT_WAIT_MS);
	int port;

	while ((port = it_logged_port(b, ", metrics 127.0.0.1:")) <= 0) {
		if (pd_now_ns() >= deadline) {
			pd_test_broker_dump_log(b);
			fail_msg("%s never said where it serves metrics", b->name);
		}
		(void)nanosleep(&(struct timespec){ 0, 5 * 1000 * 1000 }, NULL);
	}
	return port;
}

/* curl -sS -i [extra...] http://127.0.0.1:port<path>; the HTTP status. */
static int curl(struct pd_run_result *r, int port, const char *path, const char *const *extra)
{
	const char *argv[16] = { curl_bin, "-sS", "-i", "--max-time", "5" };
	char url[128];
	int n = 5, status = -1;

	(void)snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
	for (; extra && *extra && n < 14; extra++)
		argv[n++] = *extra;
	argv[n++] = url;
	argv[n] = NULL;
	pd_run_free(r);
	assert_int_equal(pd_run(argv, 10000, r), 0);
	if (r->exit_code != 0 || sscanf(r->out, "HTTP/1.1 %d ", &status) != 1)
		fail_msg("curl %s: exit %d\n%s\n%s", url, r->exit_code, r->out, r->err);
	return status;
}

#define CURL(r, port, path, ...) curl((r), (port), (path), (const char *const[]){ __VA_ARGS__ })

/* GET /metrics, answered 200 within SCRAPE_MS. */
static void scrape_quick(struct pd_run_result *r, int port, const char *beside)
{
	uint64_t t0 = pd_now_ns(), ms;

	assert_int_equal(curl(r, port, "/metrics", NULL), 200);
	ms = (pd_now_ns() - t0) / PD_NS_PER_MS;
	if (ms > SCRAPE_MS)
		fail_msg("a scrape beside %s took %llu ms", beside, (unsigned long long)ms);
}

/* The body of a curl -i answer. */
static const char *body_of(const struct pd_run_result *r)
{
	const char *p = strstr(r->out, "\r\n\r\n");

	assert_non_null(p);
	return p + 4;
}

static void expect_has(const char *text, const char *piece)
{
	if (!strstr(text, piece))
		fail_msg("'%s' not in:\n%.4000s", piece, text);
}

/* pdkv_<name>{broker="B"} of a scrape, or -1. */
static double counter_of(const char *text, const char *b, const char *name)
{
	char prefix[160];

	(void)snprintf(prefix, sizeof(prefix), "pdkv_%s{broker=\"%s\"} ", name, b);
	return pd_prom_find(text, prefix);
}

/* Scrape until pdkv_<name> is at least min (published every 100 ms); its value. */
static double wait_counter(struct pd_run_result *r, int port, const char *b, const char *name,
			   double min)
{
	uint64_t deadline = pd_deadline_ms(5000);
	double v;

	for (;;) {
		assert_int_equal(curl(r, port, "/metrics", NULL), 200);
		v = counter_of(body_of(r), b, name);
		if (v >= min || pd_now_ns() >= deadline)
			return v;
		(void)nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
	}
}

/* it_stat(b, name) once it is 0 (published every 100 ms), or after 3 s. */
static uint64_t wait_stat_zero(const struct pd_test_broker *b, const char *name)
{
	uint64_t deadline = pd_deadline_ms(3000), v;

	while ((v = it_stat(b, name)) != 0 && pd_now_ns() < deadline)
		(void)nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	return v;
}

/* ---- raw connections ------------------------------------------------------------------ */

/* What the server sends until it closes (or ms pass); the number of bytes. */
static size_t raw_read_all(int fd, char *out, size_t cap, uint32_t ms)
{
	uint64_t deadline = pd_deadline_ms(ms);
	size_t n = 0;

	while (n + 1 < cap && pd_now_ns() < deadline) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, 50) <= 0)
			continue;
		r = recv(fd, out + n, cap - 1 - n, 0);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	out[n] = '\0';
	return n;
}

/* Send req (len bytes; half-close after it when shut) and read the answer. */
static char *raw_exchange(int port, const void *req, size_t len, int shut)
{
	char *out = malloc(RAW_MAX);
	int fd = it_raw_connect(port);

	assert_non_null(out);
	assert_int_equal(send(fd, req, len, MSG_NOSIGNAL), (ssize_t)len);
	if (shut)
		(void)shutdown(fd, SHUT_WR);
	(void)raw_read_all(fd, out, RAW_MAX, 5000);
	(void)close(fd);
	return out;
}

static void expect_raw(int port, const void *req, size_t len, const char *status_line,
		       const char *why)
{
	char *out = raw_exchange(port, req, len, 0);

	if (strncmp(out, status_line, strlen(status_line)) != 0)
		fail_msg("'%.40s...': got '%.200s', expected '%s'", (const char *)req, out,
			 status_line);
	expect_has(out, "Connection: close\r\n");
	expect_has(out, why);
	free(out);
}

/* A HEAD request's answer: status_line, headers, and not a byte more
 * (curl -I would not read a body the server sent anyway). */
static void expect_head_only(int port, const char *req, const char *status_line)
{
	char *out = raw_exchange(port, req, strlen(req), 0);
	const char *end = strstr(out, "\r\n\r\n");

	if (strncmp(out, status_line, strlen(status_line)) != 0 || !end || end[4] != '\0')
		fail_msg("'%s': expected '%s' and headers only, got:\n%.400s", req, status_line, out);
	expect_has(out, "Content-Length: ");
	free(out);
}

/* ---- pdctl ------------------------------------------------------------------------------ */

/* pdctl metrics for b; r keeps its output. */
static void pdctl_metrics(struct pd_run_result *r, const struct pd_test_broker *b)
{
	static char bin[128];
	const char *argv[] = { bin, "--name", b->name, "--rundir", b->rundir, "metrics", NULL };

	assert_int_equal(pd_run_bin("pdctl", bin, sizeof(bin)), 0);
	pd_run_free(r);
	assert_int_equal(pd_run(argv, 10000, r), 0);
	assert_int_equal(r->exit_code, 0);
}

/* The same families, of the same types, in both: each way. */
static void expect_same_families(const struct pd_prom *a, const struct pd_prom *b)
{
	for (uint32_t i = 0; i < a->nfam; i++) {
		const char *t = pd_prom_type(b, a->fam[i]);

		if (!t || strcmp(t, a->ftype[i]) != 0)
			fail_msg("%s %s served, pdctl metrics: %s", a->fam[i], a->ftype[i],
				 t ? t : "none");
	}
	assert_int_equal(a->nfam, b->nfam);
}

/* ---- tests ------------------------------------------------------------------------------ */

static int setup(void **state)
{
	(void)state;
	if (find_curl() < 0) {
		(void)printf("curl not installed (tools/deps.sh installs it)\n");
		exit(77);
	}
	return 0;
}

/* What a broker that failed to start may have left in rundir, under its name. */
static void rundir_clean(const char *rundir, const char *name)
{
	DIR *d = opendir(rundir);
	struct dirent *e;
	char path[512];

	while (d && (e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, name, strlen(name)) != 0)
			continue;
		(void)snprintf(path, sizeof(path), "%s/%s", rundir, e->d_name);
		(void)unlink(path);
	}
	if (d)
		(void)closedir(d);
	(void)rmdir(rundir); /* fails while another broker's files are there */
}

/* pdbroker NAME --metrics-listen addr: its exit code; r keeps the output. */
static int broker_with(struct pd_run_result *r, const char *addr)
{
	static char bin[128];
	char name[64], rundir[96];
	const char *argv[] = { bin, "--name", name, "--rundir", rundir, "--ctrl",
			       "tcp://127.0.0.1:*", "--data", "127.0.0.1:0", "--send-slots", "4",
			       "--recv-slots", "4", "--slot-size", "64K", "--metrics-listen", addr,
			       NULL };

	assert_int_equal(pd_run_bin("pdbroker", bin, sizeof(bin)), 0);
	pd_test_name(name, sizeof(name), "itMbad");
	(void)snprintf(rundir, sizeof(rundir), "/tmp/pdkv-it-%d", (int)getpid());
	pd_run_free(r);
	assert_int_equal(pd_run(argv, 10000, r), 0);
	rundir_clean(rundir, name);
	return r->exit_code;
}

static void test_bad_address_refused_at_start(void **state)
{
	static const char *const bad[] = { "localhost", "127.0.0.1", "127.0.0.1:65536",
					   "127.0.0.1:-1", ":9100", "127.0.0.1:9100x",
					   "[::1:9100", "a b:9100" };
	struct pd_run_result r = { 0 };
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
	socklen_t alen = sizeof(a);
	char addr[64], want[96];
	int busy = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	(void)state;
	for (size_t i = 0; i < PD_ARRAY_SIZE(bad); i++) {
		if (broker_with(&r, bad[i]) != 2)
			fail_msg("--metrics-listen '%s': exit %d\n%s", bad[i], r.exit_code, r.err);
		expect_has(r.err, "--metrics-listen");
	}
	/* a name, not an address (as --data): refused, saying so */
	assert_int_equal(broker_with(&r, "localhost:9100"), 1);
	expect_has(r.err, "--metrics-listen localhost:9100: not a numeric HOST:PORT");
	/* a port another socket holds: refused, naming the flag and the address */
	assert_true(busy >= 0);
	assert_int_equal(bind(busy, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(busy, 1), 0);
	assert_int_equal(getsockname(busy, (struct sockaddr *)&a, &alen), 0);
	(void)snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(a.sin_port));
	assert_int_equal(broker_with(&r, addr), 1);
	(void)snprintf(want, sizeof(want), "--metrics-listen %s: cannot listen", addr);
	expect_has(r.err, want);
	expect_has(r.err, "in use");
	(void)close(busy);
	/* not an address of this host */
	assert_int_equal(broker_with(&r, "192.0.2.1:9100"), 1);
	expect_has(r.err, "--metrics-listen 192.0.2.1:9100: cannot listen");
	pd_run_free(&r);
}

/* Values of the decode broker that only a request moves, in a scrape. */
struct moved {
	double chunks, bytes, released, peer_chunks_rx;
};

static struct moved moved_of(const char *text, const struct it *t)
{
	char prefix[256];
	struct moved m = { counter_of(text, t->d.name, "chunks_recv"),
			   counter_of(text, t->d.name, "bytes_recv"),
			   counter_of(text, t->d.name, "rx_released"), 0 };

	(void)snprintf(prefix, sizeof(prefix), "pdkv_peer_chunks{broker=\"%s\",peer=\"%s\",ctrl=\"%s\","
		       "dir=\"rx\"} ", t->d.name, t->p.name, t->p.ctrl);
	m.peer_chunks_rx = pd_prom_find(text, prefix);
	return m;
}

static void test_scrape_moves_after_transfer(void **state)
{
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 24,
							.d_extra = metrics_args });
	struct pd_prom *http = calloc(1, sizeof(*http)), *ctl = calloc(1, sizeof(*ctl));
	struct pd_run_result r = { 0 }, rc = { 0 };
	int port = metrics_port(&t->d);
	struct moved before, after, by_ctl;
	char info[160];

	(void)state;
	assert_true(http && ctl);
	assert_int_equal(curl(&r, port, "/metrics", NULL), 200);
	expect_has(r.out, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n");
	pd_prom_check(http, body_of(&r), t->d.name);
	before = moved_of(body_of(&r), t);
	assert_true(before.chunks == 0 && before.bytes == 0 && before.released == 0);

	assert_int_equal(it_put(t, "req-m", 0, 4, 4), 0);
	it_expect_event(t, "req-m", PD_EV_PUT_DONE);
	it_verify(t, "req-m", 4);
	assert_int_equal(pd_recv_release(t->da, "req-m"), 0);

	/* what the request moved, and nothing else */
	assert_true(wait_counter(&r, port, t->d.name, "rx_released", 1) == 1);
	after = moved_of(body_of(&r), t);
	assert_true(after.chunks == 4 && after.peer_chunks_rx == 4);
	assert_true(after.bytes == (double)(it_len(0) + it_len(1) + it_len(2) + it_len(3)));
	/* well formed; the same families, types and values as pdctl metrics */
	pd_prom_check(http, body_of(&r), t->d.name);
	pdctl_metrics(&rc, &t->d);
	pd_prom_check(ctl, rc.out, t->d.name);
	expect_same_families(http, ctl);
	by_ctl = moved_of(rc.out, t);
	assert_memory_equal(&by_ctl, &after, sizeof(after));
	(void)snprintf(info, sizeof(info), "pdkv_broker_info{broker=\"%s\",pid=\"%d\",", t->d.name,
		       (int)t->d.pid);
	expect_has(body_of(&r), info);
	expect_has(body_of(&r), ",state=\"ready\"} 1\n");
	free(http);
	free(ctl);
	pd_run_free(&r);
	pd_run_free(&rc);
	it_stop(t, 0);
}

static void test_errors_answered_and_counted(void **state)
{
	static const char big_head[] = "GET /metrics HTTP/1.1\r\nX-Big: ";
	static const char junk[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n";
	struct pd_test_broker b;
	struct pd_run_result r = { 0 };
	char *big = malloc(3 * PD_METRICS_HEAD_MAX), *out;
	int port;

	(void)state;
	assert_non_null(big);
	assert_int_equal(pd_test_broker_start(&b, "itM", lone_args), 0);
	port = metrics_port(&b);
	/* 404 x3 (HEAD's without a body), 405 x1 */
	assert_int_equal(curl(&r, port, "/nope", NULL), 404);
	expect_has(body_of(&r), "not found: this server serves GET /metrics only\n");
	assert_int_equal(CURL(&r, port, "/", "-X", "GET", NULL), 404);
	expect_head_only(port, "HEAD /nope HTTP/1.1\r\n\r\n", "HTTP/1.1 404 ");
	assert_int_equal(CURL(&r, port, "/metrics", "-X", "POST", NULL), 405);
	expect_has(r.out, "Allow: GET, HEAD\r\n");
	/* served: HEAD (headers only), a query, HTTP/1.0 */
	assert_int_equal(CURL(&r, port, "/metrics", "-I", NULL), 200);
	expect_head_only(port, "HEAD /metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 200 ");
	assert_int_equal(CURL(&r, port, "/metrics?x=1", "--http1.0", NULL), 200);

	/* malformed, x5: each answered with its reason */
	expect_raw(port, "GARBAGE\r\n\r\n", 11, "HTTP/1.1 400 Bad Request\r\n",
		   "malformed request line");
	expect_raw(port, junk, sizeof(junk) - 1, "HTTP/1.1 400 Bad Request\r\n", "NUL byte");
	expect_raw(port, "GET /metrics HTTP/2.0\r\n\r\n", 25, "HTTP/1.1 505 ",
		   "HTTP version not supported");
	expect_raw(port, "GET /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 47,
		   "HTTP/1.1 400 ", "request bodies are not accepted");
	memcpy(big, big_head, sizeof(big_head) - 1);
	memset(big + sizeof(big_head) - 1, 'b', 3 * PD_METRICS_HEAD_MAX - sizeof(big_head) + 1);
	expect_raw(port, big, 3 * PD_METRICS_HEAD_MAX, "HTTP/1.1 431 ", "too large");
	/* a request, then the client's half-close: still answered */
	out = raw_exchange(port, "GET /metrics HTTP/1.0\r\n\r\n", 25, 1);
	expect_has(out, "HTTP/1.1 200 OK\r\n");
	expect_has(out, "# TYPE pdkv_metrics_bad_requests counter\n");
	free(out);

	/* counted, each where it belongs */
	assert_true(wait_counter(&r, port, b.name, "metrics_bad_requests", 6) == 6);
	assert_true(counter_of(body_of(&r), b.name, "metrics_not_found") == 3);
	assert_true(counter_of(body_of(&r), b.name, "metrics_scrapes") >= 4);
	assert_true(counter_of(body_of(&r), b.name, "metrics_timeouts") == 0);
	assert_true(counter_of(body_of(&r), b.name, "metrics_failed") == 0);
	free(big);
	pd_run_free(&r);
	(void)pd_test_broker_stop(&b);
}

/* A client that sends its head one byte at a time keeps sending, but is cut
 * (408) PD_METRICS_HEAD_MS after its accept; scrapes meanwhile are answered
 * at once. */
static void test_slow_client_cut_at_deadline(void **state)
{
	static const char start[] = "GET /metrics HTTP/1.1\r\nX-Slow: ";
	struct pd_test_broker b;
	struct pd_run_result r = { 0 };
	char out[512];
	uint64_t t0, cut_ms;
	int port, fd, scrapes = 0;

	(void)state;
	assert_int_equal(pd_test_broker_start(&b, "itM", lone_args), 0);
	port = metrics_port(&b);
	fd = it_raw_connect(port);
	t0 = pd_now_ns();
	assert_int_equal(send(fd, start, sizeof(start) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(start) - 1);
	for (int i = 0;; i++) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (poll(&p, 1, 100) > 0)
			break; /* the server speaks: its answer, or its close */
		if (pd_now_ns() - t0 > (PD_METRICS_HEAD_MS + 3000) * PD_NS_PER_MS)
			fail_msg("a client sending a byte every 100 ms kept its connection %u ms",
				 PD_METRICS_HEAD_MS + 3000);
		assert_int_equal(send(fd, "a", 1, MSG_NOSIGNAL), 1);
		if (i % 4 == 3) {
			scrape_quick(&r, port, "a slow client");
			scrapes++;
		}
	}
	cut_ms = (pd_now_ns() - t0) / PD_NS_PER_MS;
	(void)raw_read_all(fd, out, sizeof(out), 3000);
	(void)close(fd);
	if (strncmp(out, "HTTP/1.1 408 Request Timeout\r\n", 30) != 0)
		fail_msg("the slow client got '%.200s'", out);
	if (cut_ms + 50 < PD_METRICS_HEAD_MS || cut_ms > PD_METRICS_HEAD_MS + 1000)
		fail_msg("cut after %llu ms, its deadline is %u ms", (unsigned long long)cut_ms,
			 PD_METRICS_HEAD_MS);
	assert_true(scrapes >= 3);
	assert_true(it_wait_stat(&b, "metrics.timeouts", 1) == 1);
	assert_true(it_wait_stat(&b, "metrics.scrapes", (uint64_t)scrapes) == (uint64_t)scrapes);
	pd_run_free(&r);
	(void)pd_test_broker_stop(&b);
}

/* Connections that say nothing, below the cap and then far above it:
 * scrapes go on answering at once, and every one of them is closed by the
 * broker by its deadline (408 or, evicted, 503). */
static void test_idle_connections_do_not_block(void **state)
{
	struct pd_test_broker b;
	struct pd_run_result r = { 0 };
	int fd[IDLE_CONNS + FLOOD_CONNS], port, n408 = 0, n503 = 0;
	char *out = malloc(RAW_MAX);

	(void)state;
	assert_non_null(out);
	assert_int_equal(pd_test_broker_start(&b, "itM", lone_args), 0);
	port = metrics_port(&b);
	for (int i = 0; i < IDLE_CONNS; i++) {
		fd[i] = it_raw_connect(port);
		if (i % 3 == 0) /* some start a request and stop */
			assert_int_equal(send(fd[i], "GET /metrics HTTP/1.1\r\nHo", 25, 0), 25);
	}
	scrape_quick(&r, port, "idle connections");
	/* past the cap: the oldest give way, the scrape still gets in */
	for (int i = IDLE_CONNS; i < IDLE_CONNS + FLOOD_CONNS; i++)
		fd[i] = it_raw_connect(port);
	scrape_quick(&r, port, "more connections than the cap");
	assert_true(it_wait_stat(&b, "metrics.evicted", EVICTED) >= (uint64_t)EVICTED);
	/* every one closed by the broker: evicted at once, the rest at their deadline */
	for (int i = 0; i < IDLE_CONNS + FLOOD_CONNS; i++) {
		(void)raw_read_all(fd[i], out, RAW_MAX, PD_METRICS_HEAD_MS + 3000);
		n408 += strncmp(out, "HTTP/1.1 408 ", 13) == 0;
		n503 += strncmp(out, "HTTP/1.1 503 ", 13) == 0;
		assert_int_equal(recv(fd[i], out, 1, MSG_DONTWAIT), 0); /* EOF */
		(void)close(fd[i]);
	}
	assert_true(n503 >= EVICTED);
	assert_true(n408 >= 1 && n408 + n503 == IDLE_CONNS + FLOOD_CONNS);
	assert_true(it_wait_stat(&b, "metrics.timeouts", (uint64_t)n408) == (uint64_t)n408);
	assert_int_equal(wait_stat_zero(&b, "metrics.conns"), 0);
	scrape_quick(&r, port, "nothing");
	free(out);
	pd_run_free(&r);
	(void)pd_test_broker_stop(&b);
}

/* Serving metrics costs nothing while nobody asks: with a scrape done and
 * connections in every state a client can leave them in (silent, half a
 * request then half-closed, a whole request whose answer it never reads,
 * only half-closed), the broker uses a few ticks' worth of CPU in 2 s. */
static void test_idle_broker_uses_no_cpu(void **state)
{
	static const char get[] = "GET /metrics HTTP/1.1\r\n\r\n";
	struct pd_test_broker b;
	struct pd_run_result r = { 0 };
	long hz = sysconf(_SC_CLK_TCK);
	int port, fd[4];
	uint64_t c0, used_ms;

	(void)state;
	assert_int_equal(pd_test_broker_start(&b, "itM", lone_args), 0);
	port = metrics_port(&b);
	assert_int_equal(curl(&r, port, "/metrics", NULL), 200);
	for (int i = 0; i < 4; i++)
		fd[i] = it_raw_connect(port);
	assert_int_equal(send(fd[1], get, 10, MSG_NOSIGNAL), 10);
	(void)shutdown(fd[1], SHUT_WR);
	assert_int_equal(send(fd[2], get, sizeof(get) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(get) - 1);
	(void)shutdown(fd[3], SHUT_WR);
	(void)nanosleep(&(struct timespec){ 0, 200 * 1000 * 1000 }, NULL);
	c0 = pd_test_cpu_ticks(b.pid);
	(void)nanosleep(&(struct timespec){ 2, 0 }, NULL);
	used_ms = (pd_test_cpu_ticks(b.pid) - c0) * 1000 / (uint64_t)hz;
	if (used_ms > IDLE_CPU_MS)
		fail_msg("an idle broker used %llu ms of CPU in 2 s", (unsigned long long)used_ms);
	for (int i = 0; i < 4; i++)
		(void)close(fd[i]);
	pd_run_free(&r);
	(void)pd_test_broker_stop(&b);
}

/* The lowest descriptor number pid does not have open (its next one). */
static int lowest_free_fd(pid_t pid)
{
	static uint8_t used[4096];
	char path[64];
	struct dirent *e;
	DIR *d;
	int fd = 0;

	memset(used, 0, sizeof(used));
	(void)snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		int n = atoi(e->d_name);

		if (e->d_name[0] != '.' && n >= 0 && n < (int)sizeof(used))
			used[n] = 1;
	}
	(void)closedir(d);
	while (fd < (int)sizeof(used) && used[fd])
		fd++;
	return fd;
}

/* Out of descriptors, accept() fails while the listener stays readable: the
 * broker counts it, stops listening until its next tick instead of spinning,
 * and serves the waiting client once descriptors are back. */
static void test_accept_errors_do_not_spin(void **state)
{
	static const char get[] = "GET /metrics HTTP/1.0\r\n\r\n";
	struct pd_test_broker b;
	struct rlimit old, low;
	long hz = sysconf(_SC_CLK_TCK);
	char *out = malloc(RAW_MAX);
	uint64_t c0, used_ms;
	int port, fd;

	(void)state;
	assert_non_null(out);
	assert_int_equal(pd_test_broker_start(&b, "itM", lone_args), 0);
	port = metrics_port(&b);
	assert_int_equal(prlimit(b.pid, RLIMIT_NOFILE, NULL, &old), 0);
	low = (struct rlimit){ .rlim_cur = (rlim_t)lowest_free_fd(b.pid), .rlim_max = old.rlim_max };
	assert_int_equal(prlimit(b.pid, RLIMIT_NOFILE, &low, NULL), 0);
	fd = it_raw_connect(port); /* the kernel's backlog takes it; accept() cannot */
	assert_int_equal(send(fd, get, sizeof(get) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(get) - 1);
	assert_true(it_wait_stat(&b, "metrics.accept_errors", 1) >= 1);
	c0 = pd_test_cpu_ticks(b.pid);
	(void)nanosleep(&(struct timespec){ 1, 0 }, NULL);
	used_ms = (pd_test_cpu_ticks(b.pid) - c0) * 1000 / (uint64_t)hz;
	if (used_ms > IDLE_CPU_MS)
		fail_msg("out of descriptors, the broker used %llu ms of CPU in 1 s",
			 (unsigned long long)used_ms);
	assert_int_equal(prlimit(b.pid, RLIMIT_NOFILE, &old, NULL), 0);
	(void)raw_read_all(fd, out, RAW_MAX, 3000);
	(void)close(fd);
	if (strncmp(out, "HTTP/1.1 200 OK\r\n", 17) != 0)
		fail_msg("the client waiting in the backlog got '%.200s'", out);
	free(out);
	(void)pd_test_broker_stop(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_address_refused_at_start),
		cmocka_unit_test(test_scrape_moves_after_transfer),
		cmocka_unit_test(test_errors_answered_and_counted),
		cmocka_unit_test(test_slow_client_cut_at_deadline),
		cmocka_unit_test(test_idle_connections_do_not_block),
		cmocka_unit_test(test_idle_broker_uses_no_cpu),
		cmocka_unit_test(test_accept_errors_do_not_spin),
	};

	(void)signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, setup, NULL);
}
