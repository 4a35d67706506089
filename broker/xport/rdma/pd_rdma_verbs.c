/* SPDX-License-Identifier: MIT */
/*
 * The RDMA transport's only calls into libibverbs and librdmacm, each
 * normalised to the house convention at this one boundary (STYLE pattern
 * 9): verbs return a positive errno (-> -rc), rdma_cm returns -1 and sets
 * errno (-> -errno), constructors return NULL and set errno (-> out pointer
 * and -errno). ibv_post_send, ibv_poll_cq and ibv_req_notify_cq are static
 * inline and ibv_reg_mr is a macro: they cannot be wrapped at link time,
 * which is why the transport calls through this table and tests can pass
 * another one.
 */
#include <errno.h>

#include "pd_err.h"
#include "pd_rdma_int.h"

/* errno after a failed call, never 0 (some paths forget to set it). */
static int err_or(int dflt)
{
	return errno ? -errno : -dflt;
}

static int verbs_rc(int rc)
{
	return rc > 0 ? -rc : rc < 0 ? err_or(EIO) : 0;
}

static int v_get_devices(struct ibv_context ***list, int *n)
{
	errno = 0;
	*list = rdma_get_devices(n);
	return *list ? 0 : err_or(ENODEV);
}

static void v_free_devices(struct ibv_context **list)
{
	rdma_free_devices(list);
}

static const char *v_dev_name(struct ibv_context *ctx)
{
	return ibv_get_device_name(ctx->device);
}

static int v_alloc_pd(struct ibv_context *ctx, struct ibv_pd **out)
{
	errno = 0;
	*out = ibv_alloc_pd(ctx);
	return *out ? 0 : err_or(ENOMEM);
}

static void v_dealloc_pd(struct ibv_pd *pd)
{
	(void)ibv_dealloc_pd(pd);
}

static int v_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access, struct ibv_mr **out)
{
	errno = 0;
	*out = ibv_reg_mr(pd, addr, len, access);
	return *out ? 0 : err_or(ENOMEM);
}

static void v_dereg_mr(struct ibv_mr *mr)
{
	(void)ibv_dereg_mr(mr);
}

static int v_create_comp_channel(struct ibv_context *ctx, struct ibv_comp_channel **out)
{
	errno = 0;
	*out = ibv_create_comp_channel(ctx);
	return *out ? 0 : err_or(ENOMEM);
}

static void v_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	(void)ibv_destroy_comp_channel(ch);
}

static int v_create_cq(struct ibv_context *ctx, int cqe, void *cq_ctx,
		       struct ibv_comp_channel *ch, struct ibv_cq **out)
{
	errno = 0;
	*out = ibv_create_cq(ctx, cqe, cq_ctx, ch, 0);
	return *out ? 0 : err_or(ENOMEM);
}

static void v_destroy_cq(struct ibv_cq *cq)
{
	(void)ibv_destroy_cq(cq);
}

static int v_req_notify_cq(struct ibv_cq *cq)
{
	return verbs_rc(ibv_req_notify_cq(cq, 0));
}

static int v_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_ctx)
{
	return pd_sys_rc(ibv_get_cq_event(ch, cq, cq_ctx));
}

static void v_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	ibv_ack_cq_events(cq, n);
}

static int v_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int rc = ibv_poll_cq(cq, n, wc);

	return rc < 0 ? -EIO : rc; /* providers return a bare -1 or their own code */
}

static int v_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	return verbs_rc(ibv_post_send(qp, wr, bad));
}

static int v_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	return pd_sys_rc(ibv_get_async_event(ctx, ev));
}

static void v_ack_async_event(struct ibv_async_event *ev)
{
	ibv_ack_async_event(ev);
}

static int v_create_event_channel(struct rdma_event_channel **out)
{
	errno = 0;
	*out = rdma_create_event_channel();
	return *out ? 0 : err_or(ENOMEM);
}

static void v_destroy_event_channel(struct rdma_event_channel *ch)
{
	rdma_destroy_event_channel(ch);
}

static int v_create_id(struct rdma_event_channel *ch, void *ctx, struct rdma_cm_id **out)
{
	return pd_sys_rc(rdma_create_id(ch, out, ctx, RDMA_PS_TCP));
}

static void v_destroy_id(struct rdma_cm_id *id)
{
	(void)rdma_destroy_id(id);
}

static int v_bind_addr(struct rdma_cm_id *id, struct sockaddr *a)
{
	return pd_sys_rc(rdma_bind_addr(id, a));
}

static int v_listen(struct rdma_cm_id *id, int backlog)
{
	return pd_sys_rc(rdma_listen(id, backlog));
}

static int v_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst,
			  int timeout_ms)
{
	return pd_sys_rc(rdma_resolve_addr(id, src, dst, timeout_ms));
}

static int v_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	return pd_sys_rc(rdma_resolve_route(id, timeout_ms));
}

static int v_set_ack_timeout(struct rdma_cm_id *id, uint8_t timeout)
{
	return pd_sys_rc(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
					 &timeout, sizeof(timeout)));
}

static int v_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	return pd_sys_rc(rdma_create_qp(id, pd, a));
}

static void v_destroy_qp(struct rdma_cm_id *id)
{
	rdma_destroy_qp(id);
}

static int v_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	return pd_sys_rc(rdma_connect(id, p));
}

static int v_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	return pd_sys_rc(rdma_accept(id, p));
}

static int v_reject(struct rdma_cm_id *id, const void *priv, uint8_t len)
{
	return pd_sys_rc(rdma_reject(id, priv, len));
}

static int v_disconnect(struct rdma_cm_id *id)
{
	return pd_sys_rc(rdma_disconnect(id));
}

static int v_get_cm_event(struct rdma_event_channel *ch, struct rdma_cm_event **ev)
{
	return pd_sys_rc(rdma_get_cm_event(ch, ev));
}

static void v_ack_cm_event(struct rdma_cm_event *ev)
{
	(void)rdma_ack_cm_event(ev);
}

const struct pd_rdma_verbs pd_rdma_verbs_real = {
	.get_devices = v_get_devices,
	.free_devices = v_free_devices,
	.dev_name = v_dev_name,
	.alloc_pd = v_alloc_pd,
	.dealloc_pd = v_dealloc_pd,
	.reg_mr = v_reg_mr,
	.dereg_mr = v_dereg_mr,
	.create_comp_channel = v_create_comp_channel,
	.destroy_comp_channel = v_destroy_comp_channel,
	.create_cq = v_create_cq,
	.destroy_cq = v_destroy_cq,
	.req_notify_cq = v_req_notify_cq,
	.get_cq_event = v_get_cq_event,
	.ack_cq_events = v_ack_cq_events,
	.poll_cq = v_poll_cq,
	.post_send = v_post_send,
	.get_async_event = v_get_async_event,
	.ack_async_event = v_ack_async_event,
	.create_event_channel = v_create_event_channel,
	.destroy_event_channel = v_destroy_event_channel,
	.create_id = v_create_id,
	.destroy_id = v_destroy_id,
	.bind_addr = v_bind_addr,
	.listen = v_listen,
	.resolve_addr = v_resolve_addr,
	.resolve_route = v_resolve_route,
	.set_ack_timeout = v_set_ack_timeout,
	.create_qp = v_create_qp,
	.destroy_qp = v_destroy_qp,
	.connect = v_connect,
	.accept = v_accept,
	.reject = v_reject,
	.disconnect = v_disconnect,
	.get_cm_event = v_get_cm_event,
	.ack_cm_event = v_ack_cm_event,
};
