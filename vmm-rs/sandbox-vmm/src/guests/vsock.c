/*
 * virtio-vsock test guest (guest CID 3), in one of two modes chosen on its command line:
 *
 *   listen=PORT [conns=N]  accepts connections to PORT and echoes every byte back; after N
 *                          connections have closed (0: never) it prints "echo done N" and
 *                          resets the machine.
 *   connect=PORT           connects to host port PORT, sends "hello from the guest\n", prints
 *                          what the host answers as "host says: ...", shuts the connection
 *                          down and resets the machine.
 *
 * It keeps the protocol's rules: it answers CREDIT_REQUEST and echoes no more than the host's
 * credit allows (asking once with CREDIT_REQUEST when it has none). Data is echoed straight out
 * of the receive buffer it arrived in (copying costs dearly where guest instructions are
 * emulated); while the host's credit holds the echo back, the buffer is kept, but never the
 * last free one: then the oldest kept buffer is copied into the connection's own buffer (whose
 * size is the credit this guest advertises) and returned, so a credit update from the host
 * always has somewhere to land. Receive buffers carry header and data in one descriptor, as
 * Linux 6.2+ posts them; packets it sends put the header in one descriptor and the data in
 * another.
 */
#include "virtio.h"

#define OP_REQUEST 1
#define OP_RESPONSE 2
#define OP_RST 3
#define OP_SHUTDOWN 4
#define OP_RW 5
#define OP_CREDIT_UPDATE 6
#define OP_CREDIT_REQUEST 7

struct hdr {
    u64 src_cid;
    u64 dst_cid;
    u32 src_port;
    u32 dst_port;
    u32 len;
    u16 type;
    u16 op;
    u32 flags;
    u32 buf_alloc;
    u32 fwd_cnt;
} __attribute__((packed));

#define HDR_LEN 44
#define RX_BUFS 8
#define RX_DATA 65536
#define MAX_CONNS 4
#define CONN_BUF (256 * 1024) /* a power of two */
#define GUEST_PORT_OUT 1234

struct conn {
    int open;
    u32 port;      /* the guest's */
    u32 host_port; /* the host's */
    u32 peer_buf_alloc, peer_fwd_cnt;
    u32 tx_cnt;  /* bytes sent to the host */
    u32 fwd_cnt; /* bytes received and passed on (echoed or printed) */
    int asked;   /* a CREDIT_REQUEST is out */
    u32 in, out; /* bytes ever put into and taken out of buf */
    u8 *buf;     /* CONN_BUF bytes of received data waiting to be echoed */
};

static struct vq rxq, txq, evq;
static u8 rx_bufs[RX_BUFS][HDR_LEN + RX_DATA] __attribute__((aligned(64)));
static volatile struct hdr tx_hdr;
static struct conn conns[MAX_CONNS];
static u8 conn_bufs[MAX_CONNS][CONN_BUF] __attribute__((aligned(64)));
/* Receive buffers kept while their data waits for host credit, oldest first. */
static u16 held[RX_BUFS];
static int held_count;
static u32 held_done; /* bytes of the oldest kept buffer already echoed or copied aside */

static void post(u16 i) {
    vq_set(&rxq, i, rx_bufs[i], HDR_LEN + RX_DATA, DESC_F_WRITE, 0);
    vq_offer(&rxq, i);
    vq_notify(&rxq);
}

/* Sends one packet and waits until the device took it. */
static void send(const struct conn *c, u32 port, u32 host_port, u16 op, u32 flags, const u8 *data, u32 len) {
    tx_hdr.src_cid = 3;
    tx_hdr.dst_cid = 2;
    tx_hdr.src_port = port;
    tx_hdr.dst_port = host_port;
    tx_hdr.len = len;
    tx_hdr.type = 1;
    tx_hdr.op = op;
    tx_hdr.flags = flags;
    tx_hdr.buf_alloc = CONN_BUF;
    tx_hdr.fwd_cnt = c ? c->fwd_cnt : 0;
    vq_set(&txq, 0, &tx_hdr, HDR_LEN, len ? DESC_F_NEXT : 0, 1);
    if (len) vq_set(&txq, 1, data, len, 0, 0);
    vq_offer(&txq, 0);
    vq_notify(&txq);
    vq_wait(&txq);
}

static struct conn *find(u32 port, u32 host_port) {
    for (int i = 0; i < MAX_CONNS; i++)
        if (conns[i].open && conns[i].port == port && conns[i].host_port == host_port) return &conns[i];
    return NULL;
}

static u32 credit(const struct conn *c) { return c->peer_buf_alloc - (c->tx_cnt - c->peer_fwd_cnt); }

/* Sends up to `len` bytes at `data` on `c` as the host's credit allows; returns how many went.
 * With no credit at all it asks the host for an update, once. */
static u32 echo_some(struct conn *c, const u8 *data, u32 len) {
    u32 sent = 0;
    while (sent < len) {
        u32 n = len - sent;
        if (n > RX_DATA) n = RX_DATA;
        if (n > credit(c)) n = credit(c);
        if (n == 0) {
            if (!c->asked) send(c, c->port, c->host_port, OP_CREDIT_REQUEST, 0, NULL, 0);
            c->asked = 1;
            break;
        }
        c->fwd_cnt += n;
        send(c, c->port, c->host_port, OP_RW, 0, data + sent, n);
        c->tx_cnt += n;
        sent += n;
    }
    return sent;
}

/* Gives the oldest kept receive buffer back to the device. */
static void release_oldest(void) {
    u16 done = held[0];
    for (int i = 1; i < held_count; i++) held[i - 1] = held[i];
    held_count--;
    held_done = 0;
    post(done);
}

/* Echoes what waits, oldest first: each connection's own buffer, then the kept receive
 * buffers in arrival order. */
static void echo_all(void) {
    for (int i = 0; i < MAX_CONNS; i++) {
        struct conn *c = &conns[i];
        while (c->open && c->in != c->out) {
            u32 at = c->out % CONN_BUF, n = c->in - c->out;
            if (n > CONN_BUF - at) n = CONN_BUF - at; /* up to the end of the ring */
            u32 sent = echo_some(c, c->buf + at, n);
            c->out += sent;
            if (sent < n) break;
        }
    }
    while (held_count) {
        volatile struct hdr *h = (volatile struct hdr *)rx_bufs[held[0]];
        struct conn *c = find(h->dst_port, h->src_port);
        if (c) {
            if (c->in != c->out) return; /* its older data waits for credit */
            held_done += echo_some(c, rx_bufs[held[0]] + HDR_LEN + held_done, h->len - held_done);
            if (held_done < h->len) return;
        }
        release_oldest();
    }
}

/* Never keep the last free receive buffer: copy the oldest kept one aside and return it. */
static void spill(void) {
    while (held_count >= RX_BUFS - 1) {
        volatile struct hdr *h = (volatile struct hdr *)rx_bufs[held[0]];
        struct conn *c = find(h->dst_port, h->src_port);
        /* The credit this guest gave bounds what it holds: the ring has room. */
        for (u32 done = held_done; c && done < h->len;) {
            u32 at = c->in % CONN_BUF, n = h->len - done;
            if (n > CONN_BUF - at) n = CONN_BUF - at;
            memcpy(c->buf + at, rx_bufs[held[0]] + HDR_LEN + done, n);
            c->in += n;
            done += n;
        }
        release_oldest();
    }
}

static void listen_mode(u32 port, u64 limit) {
    u64 closed = 0;
    for (;;) {
        struct used_elem e = vq_wait(&rxq);
        u16 id = (u16)e.id;
        volatile struct hdr *h = (volatile struct hdr *)rx_bufs[id];
        struct conn *c = find(h->dst_port, h->src_port);
        int keep = 0;
        if (c) {
            c->peer_buf_alloc = h->buf_alloc;
            c->peer_fwd_cnt = h->fwd_cnt;
            c->asked = 0;
        }
        switch (h->op) {
        case OP_REQUEST:
            if (c || h->dst_port != port) {
                send(NULL, h->dst_port, h->src_port, OP_RST, 0, NULL, 0);
                break;
            }
            for (int i = 0; i < MAX_CONNS && !c; i++)
                if (!conns[i].open) c = &conns[i];
            if (!c) {
                send(NULL, h->dst_port, h->src_port, OP_RST, 0, NULL, 0);
                break;
            }
            *c = (struct conn){1, h->dst_port, h->src_port, h->buf_alloc, h->fwd_cnt, 0, 0, 0, 0, 0, conn_bufs[c - conns]};
            send(c, c->port, c->host_port, OP_RESPONSE, 0, NULL, 0);
            break;
        case OP_RW:
            if (c && h->len) {
                held[held_count++] = id;
                keep = 1;
            }
            break;
        case OP_CREDIT_REQUEST:
            if (c) send(c, c->port, c->host_port, OP_CREDIT_UPDATE, 0, NULL, 0);
            break;
        case OP_SHUTDOWN:
            if (c) {
                send(c, c->port, c->host_port, OP_RST, 0, NULL, 0);
                c->open = 0;
                closed++;
            }
            break;
        case OP_RST:
            if (c) {
                c->open = 0;
                closed++;
            }
            break;
        }
        if (!keep) post(id);
        echo_all();
        spill();
        if (limit && closed == limit) {
            put_str("echo done ");
            put_u64(closed);
            put_char('\n');
            reset();
        }
    }
}

/* The next packet for connection `c`, handling credit traffic on the way. */
static volatile struct hdr *next_packet(struct conn *c, u16 *id) {
    for (;;) {
        struct used_elem e = vq_wait(&rxq);
        volatile struct hdr *h = (volatile struct hdr *)rx_bufs[e.id];
        if (h->dst_port != c->port || h->src_port != c->host_port) {
            post((u16)e.id);
            continue;
        }
        c->peer_buf_alloc = h->buf_alloc;
        c->peer_fwd_cnt = h->fwd_cnt;
        if (h->op == OP_CREDIT_REQUEST) send(c, c->port, c->host_port, OP_CREDIT_UPDATE, 0, NULL, 0);
        if (h->op == OP_CREDIT_REQUEST || h->op == OP_CREDIT_UPDATE) {
            post((u16)e.id);
            continue;
        }
        *id = (u16)e.id;
        return h;
    }
}

static void connect_mode(u32 host_port) {
    static const char hello[] = "hello from the guest\n";
    struct conn c = {1, GUEST_PORT_OUT, host_port, 0, 0, 0, 0, 0, 0, 0, NULL};
    u16 id;
    send(&c, c.port, host_port, OP_REQUEST, 0, NULL, 0);
    volatile struct hdr *h = next_packet(&c, &id);
    if (h->op != OP_RESPONSE) fail("connection refused");
    post(id);
    put_str("connected to host port ");
    put_u64(host_port);
    put_char('\n');
    send(&c, c.port, host_port, OP_RW, 0, (const u8 *)hello, sizeof hello - 1);
    c.tx_cnt += sizeof hello - 1;
    put_str("host says: ");
    for (int newline = 0; !newline;) {
        h = next_packet(&c, &id);
        if (h->op != OP_RW) fail("no answer");
        for (u32 i = 0; i < h->len; i++) {
            char ch = (char)rx_bufs[id][HDR_LEN + i];
            put_char(ch);
            newline |= ch == '\n';
        }
        c.fwd_cnt += h->len;
        post(id);
    }
    send(&c, c.port, host_port, OP_SHUTDOWN, 3, NULL, 0);
    h = next_packet(&c, &id);
    put_str(h->op == OP_RST ? "closed\n" : "no RST after shutdown\n");
    reset();
}

void guest_main(const u8 *zero_page) {
    u64 base = virtio_find(19);
    if (!base) fail("no virtio-vsock device");
    virtio_negotiate(base, 0);
    vq_init(&rxq, base, 0);
    vq_init(&txq, base, 1);
    vq_init(&evq, base, 2);
    virtio_driver_ok(base);
    if (mmio_read(base, REG_CONFIG) != 3) fail("guest CID is not 3");
    for (u16 i = 0; i < RX_BUFS; i++) post(i);
    u64 port = cmdline_u64(zero_page, "connect", 0);
    if (port) connect_mode((u32)port);
    listen_mode((u32)cmdline_u64(zero_page, "listen", 44772), cmdline_u64(zero_page, "conns", 0));
}
