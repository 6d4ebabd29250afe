/*
 * virtio-blk test guest: prints the disk's capacity, reads sector `sector=` (default 1) and
 * prints its first 32 bytes, tries to write it back (a read-only disk answers IOERR), reads
 * the disk's ID; with `bench_mib=N` it then reads N MiB in 1 MiB requests, cycling over the
 * disk, and prints "bench done". Then it resets the machine, or with `hold=1` halts for good.
 */
#include "virtio.h"

#define T_IN 0
#define T_OUT 1
#define T_GET_ID 8
#define F_RO (1u << 5)
#define CHUNK (1u << 20)

struct header {
    u32 type;
    u32 reserved;
    u64 sector;
};

static struct vq queue;
static volatile struct header hdr;
static volatile u8 status;
static u8 data[CHUNK] __attribute__((aligned(4096)));

/* One request of `len` bytes at `data`; returns the status byte. */
static u8 request(u32 type, u64 sector, u32 len) {
    hdr.type = type;
    hdr.reserved = 0;
    hdr.sector = sector;
    status = 0xff;
    u16 data_flags = type == T_OUT ? 0 : DESC_F_WRITE;
    vq_set(&queue, 0, &hdr, sizeof hdr, DESC_F_NEXT, 1);
    vq_set(&queue, 1, data, len, data_flags | DESC_F_NEXT, 2);
    vq_set(&queue, 2, &status, 1, DESC_F_WRITE, 0);
    vq_offer(&queue, 0);
    vq_notify(&queue);
    struct used_elem e = vq_wait(&queue);
    if (e.id != 0) fail("wrong used id");
    return status;
}

void guest_main(const u8 *zero_page) {
    u64 base = virtio_find(2);
    if (!base) fail("no virtio-blk device");
    virtio_negotiate(base, F_RO);
    vq_init(&queue, base, 0);
    virtio_driver_ok(base);

    u64 capacity = mmio_read(base, REG_CONFIG) | (u64)mmio_read(base, REG_CONFIG + 4) << 32;
    put_str("capacity ");
    put_u64(capacity);
    put_char('\n');

    u64 sector = cmdline_u64(zero_page, "sector", 1);
    u8 s = request(T_IN, sector, 512);
    put_str("read status ");
    put_u64(s);
    put_str(": ");
    for (int i = 0; i < 32; i++) put_char(data[i] >= 32 && data[i] < 127 ? (char)data[i] : '.');
    put_char('\n');

    put_str("write status ");
    put_u64(request(T_OUT, sector, 512));
    put_char('\n');

    put_str("id ");
    request(T_GET_ID, 0, 20);
    for (int i = 0; i < 20 && data[i]; i++) put_char((char)data[i]);
    put_char('\n');

    u64 mib = cmdline_u64(zero_page, "bench_mib", 0);
    u64 per_chunk = CHUNK / 512;
    if (mib && capacity >= per_chunk) {
        u64 at = 0;
        for (u64 i = 0; i < mib; i++) {
            if (at + per_chunk > capacity) at = 0;
            if (request(T_IN, at, CHUNK) != 0) fail("bench read");
            at += per_chunk;
        }
        put_str("bench done\n");
    }
    /* hold=1 keeps the machine up (halted) for a benchmark that goes on measuring it. */
    if (cmdline_u64(zero_page, "hold", 0)) for (;;) __asm__ volatile("hlt");
    reset();
}
