/*
 * virtio-net test guest: asks for an address with a DHCP DISCOVER, prints the offer
 * ("dhcp offer <address> router <router>"), then resolves the router with ARP and prints the
 * answer ("arp <router> is-at <mac>"), then resets the machine. Frames it does not wait for
 * (passt's IPv6 router advertisements, say) are skipped.
 */
#include "virtio.h"

#define F_MAC (1u << 5)
#define HDR 12 /* struct virtio_net_hdr_v1 */
#define RX_BUFS 4
#define BUF_LEN 2048

static struct vq rxq, txq;
static u8 mac[6];
static u8 rx_bufs[RX_BUFS][BUF_LEN] __attribute__((aligned(16)));
static u8 tx_buf[BUF_LEN] __attribute__((aligned(16)));

static void put_be16(u8 *p, u16 v) {
    p[0] = (u8)(v >> 8);
    p[1] = (u8)v;
}

static u16 get_be16(const u8 *p) { return (u16)(p[0] << 8 | p[1]); }

static void put_ip(const u8 *ip) {
    for (int i = 0; i < 4; i++) {
        put_u64(ip[i]);
        if (i < 3) put_char('.');
    }
}

static void put_mac(const u8 *m) {
    const char *hex = "0123456789abcdef";
    for (int i = 0; i < 6; i++) {
        put_char(hex[m[i] >> 4]);
        put_char(hex[m[i] & 15]);
        if (i < 5) put_char(':');
    }
}

static void post(u16 i) {
    vq_set(&rxq, i, rx_bufs[i], BUF_LEN, DESC_F_WRITE, 0);
    vq_offer(&rxq, i);
}

/* Sends `len` bytes of frame already placed at tx_buf + HDR. */
static void send(u32 len) {
    memset(tx_buf, 0, HDR);
    vq_set(&txq, 0, tx_buf, HDR + len, 0, 0);
    vq_offer(&txq, 0);
    vq_notify(&txq);
    vq_wait(&txq);
}

/* The next frame received (without its header); `*slot` is the buffer to post again. */
static const u8 *receive(u32 *len, u16 *slot) {
    struct used_elem e = vq_wait(&rxq);
    if (e.id >= RX_BUFS || e.len < HDR) fail("bad receive buffer");
    *slot = (u16)e.id;
    *len = e.len - HDR;
    return rx_bufs[e.id] + HDR;
}

static void ethernet(u8 *f, const u8 *dst, u16 type) {
    memcpy(f, dst, 6);
    memcpy(f + 6, mac, 6);
    put_be16(f + 12, type);
}

static const u8 broadcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

/* A DHCP DISCOVER from 0.0.0.0:68 to 255.255.255.255:67; returns the frame's length. */
static u32 build_discover(u8 *f) {
    const u32 bootp_len = 300;
    memset(f, 0, 14 + 20 + 8 + bootp_len);
    ethernet(f, broadcast, 0x0800);
    u8 *ip = f + 14, *udp = ip + 20, *bootp = udp + 8;
    ip[0] = 0x45;
    put_be16(ip + 2, (u16)(20 + 8 + bootp_len));
    ip[8] = 64;
    ip[9] = 17;
    memset(ip + 16, 0xff, 4);
    u32 sum = 0;
    for (int i = 0; i < 20; i += 2) sum += get_be16(ip + i);
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    put_be16(ip + 10, (u16)~sum);
    put_be16(udp, 68);
    put_be16(udp + 2, 67);
    put_be16(udp + 4, (u16)(8 + bootp_len));
    bootp[0] = 1; /* BOOTREQUEST */
    bootp[1] = 1; /* Ethernet */
    bootp[2] = 6;
    bootp[4] = 0x5a; /* xid */
    bootp[5] = 0x4d;
    bootp[10] = 0x80; /* broadcast flag */
    memcpy(bootp + 28, mac, 6);
    const u8 options[] = {99, 130, 83, 99, 53, 1, 1, 255};
    memcpy(bootp + 236, options, sizeof options);
    return 14 + 20 + 8 + bootp_len;
}

void guest_main(const u8 *zero_page) {
    (void)zero_page;
    u64 base = virtio_find(1);
    if (!base) fail("no virtio-net device");
    virtio_negotiate(base, F_MAC);
    vq_init(&rxq, base, 0);
    vq_init(&txq, base, 1);
    virtio_driver_ok(base);
    for (int i = 0; i < 6; i++) mac[i] = *(volatile u8 *)(base + REG_CONFIG + i);
    for (u16 i = 0; i < RX_BUFS; i++) post(i);
    vq_notify(&rxq);

    send(build_discover(tx_buf + HDR));
    u8 offered[4], router[4] = {0};
    for (int tries = 0;; tries++) {
        if (tries == 16) fail("no DHCP offer");
        u32 len;
        u16 slot;
        const u8 *f = receive(&len, &slot);
        int is_offer = len > 42 + 240 && get_be16(f + 12) == 0x0800 && f[23] == 17 && get_be16(f + 36) == 68 && f[42] == 2;
        if (is_offer) {
            memcpy(offered, f + 42 + 16, 4);
            for (u32 at = 42 + 240; at + 2 <= len && f[at] != 255; at += f[at] == 0 ? 1 : 2u + f[at + 1]) {
                if (f[at] == 3 && f[at + 1] >= 4) memcpy(router, f + at + 2, 4);
            }
        }
        post(slot);
        vq_notify(&rxq);
        if (is_offer) break;
    }
    put_str("dhcp offer ");
    put_ip(offered);
    put_str(" router ");
    put_ip(router);
    put_char('\n');

    u8 *f = tx_buf + HDR;
    memset(f, 0, 42);
    ethernet(f, broadcast, 0x0806);
    const u8 arp[8] = {0, 1, 8, 0, 6, 4, 0, 1}; /* Ethernet, IPv4, who-has */
    memcpy(f + 14, arp, 8);
    memcpy(f + 22, mac, 6);
    memcpy(f + 28, offered, 4);
    memcpy(f + 38, router, 4);
    send(42);
    for (int tries = 0;; tries++) {
        if (tries == 16) fail("no ARP reply");
        u32 len;
        u16 slot;
        const u8 *r = receive(&len, &slot);
        int is_reply = len >= 42 && get_be16(r + 12) == 0x0806 && get_be16(r + 20) == 2 && r[28] == router[0] && r[29] == router[1] &&
                       r[30] == router[2] && r[31] == router[3];
        if (is_reply) {
            put_str("arp ");
            put_ip(router);
            put_str(" is-at ");
            put_mac(r + 22);
            put_char('\n');
        }
        post(slot);
        vq_notify(&rxq);
        if (is_reply) break;
    }
    reset();
}
