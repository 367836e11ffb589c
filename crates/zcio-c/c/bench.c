/* Throughput of a channel from C: the sender sends TOTAL/SIZE messages of SIZE bytes under
 * emulated copy, each from a buffer of its own from zcio_alloc (2 MiB pages from 2 MiB); the
 * receiver receives each into a buffer of its own from zcio_alloc and prints the MiB/s from the
 * end of the first message to the end of the last. The same as the example
 * `cargo run --release -p zcio-c --example channel_bench` (and `zcio bench c`'s Rust side),
 * for the Rust API's numbers.
 *
 * Every byte of every message is checked, outside the clock. Message k holds message_word(k,
 * w) in its 8-byte word w (a tail shorter than a word takes its word's first bytes). Both
 * processes hold a ring of R buffers, R = the messages of the run but 256 MiB's worth at most
 * (one at least): the sender writes a batch of R messages into its ring before sending them,
 * the receiver receives the batch into its ring, the clock running from the end of the
 * batch's first message to the end of its last, then checks the batch and, where more are
 * due, sends the sender a one-byte go-ahead for the next. The MiB/s printed are the batches'
 * messages after their first over the batches' clocked times.
 *
 *     bench receiver NAME SIZE TOTAL
 *     bench sender NAME SIZE TOTAL          (SIZE, TOTAL as 64k, 1m, 1024m)
 *
 * The receiver prints `c SIZE MIB_PER_S MESSAGES` once every message has been checked. */
#include "common.h"

#define RING_BYTES ((size_t)256 << 20)

/* Word w of message k. */
static inline uint64_t message_word(uint64_t k, uint64_t w) {
    return ((w + 1) * 0x9E3779B97F4A7C15ull) ^ ((k + 1) * 0xD1B54A32D192ED03ull);
}

static void fill_message(uint8_t *b, size_t len, uint64_t k) {
    size_t w = 0;
    for (; (w + 1) * 8 <= len; w++) {
        uint64_t x = message_word(k, w);
        memcpy(b + 8 * w, &x, 8);
    }
    if (8 * w < len) {
        uint64_t x = message_word(k, w);
        memcpy(b + 8 * w, &x, len - 8 * w);
    }
}

/* The first byte of `b` that is not message k's, or `len` where all are. */
static size_t check_message(const uint8_t *b, size_t len, uint64_t k) {
    size_t w = 0;
    for (; (w + 1) * 8 <= len; w++) {
        uint64_t x = message_word(k, w), y;
        memcpy(&y, b + 8 * w, 8);
        if (x != y) break;
    }
    for (size_t i = 8 * w; i < len; i++) {
        uint64_t x = message_word(k, i / 8);
        uint8_t xb[8];
        memcpy(xb, &x, 8);
        if (b[i] != xb[i % 8]) return i;
    }
    return len;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s receiver|sender NAME SIZE TOTAL\n", argv[0]);
        return 2;
    }
    const char *name = argv[2];
    size_t size = parse_size(argv[3]);
    size_t total = parse_size(argv[4]);
    int receiver = strcmp(argv[1], "receiver") == 0;
    if (!receiver && strcmp(argv[1], "sender") != 0) {
        fprintf(stderr, "bench: receiver or sender, not %s\n", argv[1]);
        return 2;
    }
    if (size == 0 || total < size) {
        fprintf(stderr, "bench: SIZE at least 1 and TOTAL at least SIZE\n");
        return 2;
    }
    uint64_t count = total / size;
    uint64_t ring = RING_BYTES / size;
    if (ring < 1) ring = 1;
    if (ring > count) ring = count;
    zcio_buffer **bufs = calloc(ring, sizeof *bufs);
    uint8_t **data = calloc(ring, sizeof *data);
    if (!bufs || !data) {
        fprintf(stderr, "bench: out of memory\n");
        return 1;
    }
    for (uint64_t j = 0; j < ring; j++) {
        CHECK(zcio_alloc(size, &bufs[j]));
        CHECK(zcio_buffer_data_mut(bufs[j], &data[j]));
    }
    zcio_channel *ch = NULL;
    if (receiver) {
        /* Every page touched before the clock, and a byte no message leaves alone. */
        for (uint64_t j = 0; j < ring; j++) memset(data[j], 0xA5, size);
        zcio_listener *l;
        CHECK(zcio_channel_listen(name, &l));
        CHECK(zcio_listener_accept(l, 30000, &ch));
        CHECK(zcio_listener_free(l));
        double secs = 0;
        uint64_t timed = 0;
        for (uint64_t b = 0; b < count; b += ring) {
            uint64_t n = count - b < ring ? count - b : ring;
            double start = 0;
            for (uint64_t j = 0; j < n; j++) {
                size_t got;
                CHECK(zcio_channel_recv(ch, data[j], size, 30000, &got));
                if (got != size) {
                    fprintf(stderr, "bench: message %llu has %zu bytes, not %zu\n",
                            (unsigned long long)(b + j), got, size);
                    return 1;
                }
                if (j == 0) start = now_seconds();
            }
            secs += now_seconds() - start;
            timed += n - 1;
            for (uint64_t j = 0; j < n; j++) {
                size_t at = check_message(data[j], size, b + j);
                if (at != size) {
                    fprintf(stderr, "bench: message %llu is wrong at byte %zu of %zu\n",
                            (unsigned long long)(b + j), at, size);
                    return 1;
                }
                memset(data[j], 0xA5, size);
            }
            if (b + n < count) {
                uint8_t go = 1;
                uint64_t ticket;
                CHECK(zcio_channel_send(ch, ZCIO_SEMANTICS_COPY, &go, 1, &ticket));
            }
        }
        printf("c %zu %.1f %llu\n", size,
               timed > 0 ? (double)timed * (double)size / (1 << 20) / secs : 0.0,
               (unsigned long long)count);
    } else {
        for (uint64_t b = 0; b < count; b += ring) {
            uint64_t n = count - b < ring ? count - b : ring;
            for (uint64_t j = 0; j < n; j++) fill_message(data[j], size, b + j);
            if (b == 0) CHECK(zcio_channel_connect(name, 30000, &ch));
            for (uint64_t j = 0; j < n; j++) {
                uint64_t ticket;
                CHECK(zcio_channel_send(ch, ZCIO_SEMANTICS_EMULATED_COPY, data[j], size, &ticket));
            }
            if (b + n < count) {
                uint8_t go;
                size_t got;
                CHECK(zcio_channel_recv(ch, &go, 1, 60000, &got));
            }
        }
        CHECK(zcio_channel_flush(ch, 60000));
    }
    for (uint64_t j = 0; j < ring; j++) CHECK(zcio_buffer_free(bufs[j]));
    free(bufs);
    free(data);
    CHECK(zcio_channel_free(ch));
    return 0;
}
