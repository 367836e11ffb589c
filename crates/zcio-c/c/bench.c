/* Throughput of a channel from C: the sender sends one buffer of SIZE bytes from zcio_alloc
 * (2 MiB pages from 2 MiB) under emulated copy until TOTAL bytes have gone, the receiver
 * receives each message into a buffer of its own from zcio_alloc; the receiver prints the
 * MiB/s from the end of the first message to the end of the last. The same as the example
 * `cargo run --release -p zcio-c --example channel_bench`, for the Rust API's numbers.
 *
 *     bench receiver NAME SIZE TOTAL
 *     bench sender NAME SIZE TOTAL          (SIZE, TOTAL as 64k, 1m, 1024m) */
#include "common.h"

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s receiver|sender NAME SIZE TOTAL\n", argv[0]);
        return 2;
    }
    const char *name = argv[2];
    size_t size = parse_size(argv[3]);
    size_t total = parse_size(argv[4]);
    if (size == 0 || total < size) {
        fprintf(stderr, "bench: SIZE at least 1 and TOTAL at least SIZE\n");
        return 2;
    }
    uint64_t count = total / size;
    zcio_buffer *buf;
    uint8_t *data;
    CHECK(zcio_alloc(size, &buf));
    CHECK(zcio_buffer_data_mut(buf, &data));
    zcio_channel *ch;
    if (strcmp(argv[1], "receiver") == 0) {
        zcio_listener *l;
        CHECK(zcio_channel_listen(name, &l));
        CHECK(zcio_listener_accept(l, 30000, &ch));
        CHECK(zcio_listener_free(l));
        double start = 0;
        for (uint64_t k = 0; k < count; k++) {
            size_t n;
            CHECK(zcio_channel_recv(ch, data, size, 30000, &n));
            if (n != size || data[0] != (uint8_t)k) {
                fprintf(stderr, "bench: message %llu is wrong\n", (unsigned long long)k);
                return 1;
            }
            if (k == 0) start = now_seconds();
        }
        double secs = now_seconds() - start;
        printf("c %zu %.1f\n", size,
               count > 1 ? (double)(count - 1) * (double)size / (1 << 20) / secs : 0.0);
    } else {
        CHECK(zcio_channel_connect(name, 30000, &ch));
        memset(data, 1, size);
        for (uint64_t k = 0; k < count; k++) {
            uint64_t ticket;
            data[0] = (uint8_t)k;
            CHECK(zcio_channel_send(ch, ZCIO_SEMANTICS_EMULATED_COPY, data, size, &ticket));
        }
        CHECK(zcio_channel_flush(ch, 60000));
    }
    CHECK(zcio_buffer_free(buf));
    CHECK(zcio_channel_free(ch));
    return 0;
}
