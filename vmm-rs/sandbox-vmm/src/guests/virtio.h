/*
 * Support for the freestanding C test guests of sandbox-vmm: the entry point, serial output,
 * the boot command line and a minimal polling virtio-mmio driver (virtio 1.2, 4.2 and 2.7).
 *
 * The VMM enters a guest in 64-bit mode with the first 4 GiB identity-mapped and %rsi
 * pointing at the zero page, so guest-physical and virtual addresses are the same and a
 * pointer can go straight into a descriptor. Interrupts stay off: the driver polls the used
 * rings. Under PVM every guest instruction is emulated (about a million a second), so the
 * paths here are short.
 */
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long u64;

#define NULL ((void *)0)

/* Entry: a stack of our own (the boot stack sits among the boot structures), then
 * guest_main(zero page). */
__asm__(".text\n"
        ".globl _start\n"
        "_start:\n"
        "  lea guest_stack_top(%rip), %rsp\n"
        "  mov %rsi, %rdi\n"
        "  call guest_main\n"
        "1: hlt\n"
        "  jmp 1b\n"
        ".bss\n"
        ".balign 16\n"
        "guest_stack: .space 65536\n"
        "guest_stack_top:\n"
        ".text\n");

void guest_main(const u8 *zero_page);

/* gcc may emit calls to these even in freestanding code. */
void *memset(void *d, int c, u64 n) {
    u8 *p = d;
    while (n--) *p++ = (u8)c;
    return d;
}

/* One instruction, so even an instruction-emulating host (PVM) copies quickly. */
void *memcpy(void *d, const void *s, u64 n) {
    void *ret = d;
    __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
    return ret;
}

#define barrier() __asm__ volatile("" ::: "memory")

static inline void outb(u16 port, u8 v) { __asm__ volatile("outb %0, %1" ::"a"(v), "Nd"(port)); }

static inline void put_char(char c) { outb(0x3f8, (u8)c); }

static inline void put_str(const char *s) {
    while (*s) put_char(*s++);
}

static inline void put_u64(u64 v) {
    char buf[21];
    int i = 20;
    buf[i] = 0;
    do {
        buf[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put_str(&buf[i]);
}

/* Resets the machine through the i8042: the VMM stops the VM with reason "reset". */
static inline void __attribute__((noreturn)) reset(void) {
    outb(0x64, 0xfe);
    for (;;) __asm__ volatile("hlt");
}

static inline void __attribute__((noreturn)) fail(const char *why) {
    put_str("FAIL ");
    put_str(why);
    put_char('\n');
    reset();
}

/* The value of `key=` on the kernel command line (the zero page's cmd_line_ptr), or `dflt`. */
static inline u64 cmdline_u64(const u8 *zero_page, const char *key, u64 dflt) {
    const char *line = (const char *)(u64)(*(const u32 *)(zero_page + 0x228));
    for (const char *p = line; *p; p++) {
        if (p != line && p[-1] != ' ') continue;
        const char *k = key, *q = p;
        while (*k && *q == *k) k++, q++;
        if (*k || *q != '=') continue;
        u64 v = 0;
        for (q++; *q >= '0' && *q <= '9'; q++) v = v * 10 + (u64)(*q - '0');
        return v;
    }
    return dflt;
}

/* ---- virtio-mmio ---- */

#define VIRTIO_MMIO_START 0xc0001000UL
#define VIRTIO_MMIO_SIZE 0x1000UL
#define REG_MAGIC 0x000
#define REG_DEVICE_ID 0x008
#define REG_DEVICE_FEATURES 0x010
#define REG_DEVICE_FEATURES_SEL 0x014
#define REG_DRIVER_FEATURES 0x020
#define REG_DRIVER_FEATURES_SEL 0x024
#define REG_QUEUE_SEL 0x030
#define REG_QUEUE_NUM_MAX 0x034
#define REG_QUEUE_NUM 0x038
#define REG_QUEUE_READY 0x044
#define REG_QUEUE_NOTIFY 0x050
#define REG_STATUS 0x070
#define REG_QUEUE_DESC 0x080
#define REG_QUEUE_DRIVER 0x090
#define REG_QUEUE_DEVICE 0x0a0
#define REG_CONFIG 0x100

#define STATUS_ACK 1
#define STATUS_DRIVER 2
#define STATUS_DRIVER_OK 4
#define STATUS_FEATURES_OK 8
#define STATUS_NEEDS_RESET 64

#define DESC_F_NEXT 1
#define DESC_F_WRITE 2

static inline u32 mmio_read(u64 base, u32 off) { return *(volatile u32 *)(base + off); }
static inline void mmio_write(u64 base, u32 off, u32 v) { *(volatile u32 *)(base + off) = v; }

struct desc {
    u64 addr;
    u32 len;
    u16 flags;
    u16 next;
};

struct used_elem {
    u32 id;
    u32 len;
};

/* One queue of at most QUEUE_SIZE entries, its rings in one page. */
#define QUEUE_SIZE 16

struct vq {
    u64 base;
    u32 index;
    volatile struct desc *desc;
    volatile u16 *avail; /* flags, idx, ring[QUEUE_SIZE] */
    volatile u16 *used;  /* flags, idx, then used_elem[QUEUE_SIZE] */
    u16 avail_idx;
    u16 used_seen;
};

static u8 ring_pages[4][4096] __attribute__((aligned(4096)));
static int ring_pages_taken;

/* The window of the first device of `type`, or 0. */
static inline u64 virtio_find(u32 type) {
    for (u64 i = 0; i < 19; i++) {
        u64 base = VIRTIO_MMIO_START + i * VIRTIO_MMIO_SIZE;
        if (mmio_read(base, REG_MAGIC) == 0x74726976 && mmio_read(base, REG_DEVICE_ID) == type) return base;
    }
    return 0;
}

/* Reset, ACKNOWLEDGE, DRIVER, then accept VERSION_1 and those of `want` the device offers. */
static inline void virtio_negotiate(u64 base, u32 want) {
    mmio_write(base, REG_STATUS, 0);
    mmio_write(base, REG_STATUS, STATUS_ACK);
    mmio_write(base, REG_STATUS, STATUS_ACK | STATUS_DRIVER);
    mmio_write(base, REG_DEVICE_FEATURES_SEL, 0);
    u32 offered = mmio_read(base, REG_DEVICE_FEATURES);
    mmio_write(base, REG_DRIVER_FEATURES_SEL, 0);
    mmio_write(base, REG_DRIVER_FEATURES, offered & want);
    mmio_write(base, REG_DRIVER_FEATURES_SEL, 1);
    mmio_write(base, REG_DRIVER_FEATURES, 1); /* VIRTIO_F_VERSION_1 */
    mmio_write(base, REG_STATUS, STATUS_ACK | STATUS_DRIVER | STATUS_FEATURES_OK);
    if (!(mmio_read(base, REG_STATUS) & STATUS_FEATURES_OK)) fail("features refused");
}

static inline void vq_init(struct vq *q, u64 base, u32 index) {
    if (ring_pages_taken == 4) fail("out of ring pages");
    u8 *page = ring_pages[ring_pages_taken++];
    q->base = base;
    q->index = index;
    q->desc = (volatile struct desc *)page;
    q->avail = (volatile u16 *)(page + 16 * QUEUE_SIZE);
    q->used = (volatile u16 *)(page + 2048);
    q->avail_idx = 0;
    q->used_seen = 0;
    mmio_write(base, REG_QUEUE_SEL, index);
    if (mmio_read(base, REG_QUEUE_NUM_MAX) < QUEUE_SIZE) fail("queue too small");
    mmio_write(base, REG_QUEUE_NUM, QUEUE_SIZE);
    mmio_write(base, REG_QUEUE_DESC, (u32)(u64)q->desc);
    mmio_write(base, REG_QUEUE_DESC + 4, 0);
    mmio_write(base, REG_QUEUE_DRIVER, (u32)(u64)q->avail);
    mmio_write(base, REG_QUEUE_DRIVER + 4, 0);
    mmio_write(base, REG_QUEUE_DEVICE, (u32)(u64)q->used);
    mmio_write(base, REG_QUEUE_DEVICE + 4, 0);
    mmio_write(base, REG_QUEUE_READY, 1);
}

static inline void virtio_driver_ok(u64 base) {
    mmio_write(base, REG_STATUS, STATUS_ACK | STATUS_DRIVER | STATUS_FEATURES_OK | STATUS_DRIVER_OK);
    if (mmio_read(base, REG_STATUS) & STATUS_NEEDS_RESET) fail("device needs reset");
}

static inline void vq_set(struct vq *q, u16 i, const volatile void *addr, u32 len, u16 flags, u16 next) {
    q->desc[i].addr = (u64)addr;
    q->desc[i].len = len;
    q->desc[i].flags = flags;
    q->desc[i].next = next;
}

/* Offers the chain starting at descriptor `head` (without telling the device). */
static inline void vq_offer(struct vq *q, u16 head) {
    q->avail[2 + q->avail_idx % QUEUE_SIZE] = head;
    barrier();
    q->avail_idx++;
    q->avail[1] = q->avail_idx;
    barrier();
}

static inline void vq_notify(struct vq *q) { mmio_write(q->base, REG_QUEUE_NOTIFY, q->index); }

/* The next used entry, if the device returned one. */
static inline int vq_used(struct vq *q, struct used_elem *out) {
    if (q->used[1] == q->used_seen) return 0;
    barrier();
    volatile struct used_elem *ring = (volatile struct used_elem *)(q->used + 2);
    out->id = ring[q->used_seen % QUEUE_SIZE].id;
    out->len = ring[q->used_seen % QUEUE_SIZE].len;
    q->used_seen++;
    return 1;
}

/* Waits for the next used entry; fails if the device breaks meanwhile. */
static inline struct used_elem vq_wait(struct vq *q) {
    struct used_elem e;
    /* The status read is a VM exit; the used index is plain memory. */
    for (u32 spins = 1; !vq_used(q, &e); spins++) {
        if (spins % 4096 == 0 && (mmio_read(q->base, REG_STATUS) & STATUS_NEEDS_RESET)) fail("device needs reset");
    }
    return e;
}
