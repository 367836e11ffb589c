/* The receiving program: listens on a channel name, takes COUNT messages of SIZE bytes from
 * the sender that connects, checks every byte of each against the pattern the sender wrote
 * before its send (the sender overwrote its buffer right after), and tells the sender so.
 *
 *     receiver NAME [SIZE [COUNT]]       (SIZE as 4096, 64k, 1m; default 1m and 16)
 *
 * Even messages are received into a buffer zcio makes (zcio_channel_recv_alloc), odd ones
 * into the program's own (zcio_channel_recv), the first of them into one too small first. */
#include "common.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s NAME [SIZE [COUNT]]\n", argv[0]);
        return 2;
    }
    const char *name = argv[1];
    size_t size = argc > 2 ? parse_size(argv[2]) : (1u << 20);
    uint64_t count = argc > 3 ? strtoull(argv[3], NULL, 10) : 16;
    if (size == 0 || count == 0) {
        fprintf(stderr, "receiver: SIZE and COUNT must be at least 1\n");
        return 2;
    }

    zcio_listener *listener;
    zcio_channel *ch;
    CHECK(zcio_channel_listen(name, &listener));
    printf("receiver: listening on \"%s\"\n", name);
    fflush(stdout);
    CHECK(zcio_listener_accept(listener, 30000, &ch));
    CHECK(zcio_listener_free(listener)); /* the name is free again; the channel goes on */

    uint8_t *own = malloc(size);
    if (!own) {
        fprintf(stderr, "receiver: no memory for %zu bytes\n", size);
        return 1;
    }
    double start = 0;
    for (uint64_t k = 0; k < count; k++) {
        const uint8_t *data;
        size_t len;
        zcio_buffer *msg = NULL;
        if (k % 2 == 0) {
            CHECK(zcio_channel_recv_alloc(ch, 30000, &msg));
            CHECK(zcio_buffer_data(msg, &data));
            CHECK(zcio_buffer_len(msg, &len));
        } else {
            if (k == 1 && size > 1) {
                /* Too small: the message stays queued, and peek_len says its length. */
                size_t got = 12345, needed = 0;
                zcio_status s = zcio_channel_recv(ch, own, size - 1, 30000, &got);
                if (s != ZCIO_TOO_SMALL || got != 12345) {
                    fprintf(stderr, "receiver: into %zu bytes: %s, received %zu\n", size - 1,
                            zcio_status_string(s), got);
                    return 1;
                }
                CHECK(zcio_channel_peek_len(ch, 30000, &needed));
                if (needed != size) {
                    fprintf(stderr, "receiver: peek_len says %zu, expected %zu\n", needed, size);
                    return 1;
                }
            }
            CHECK(zcio_channel_recv(ch, own, size, 30000, &len));
            data = own;
        }
        if (k == 0) start = now_seconds(); /* the first message waited for the sender */
        if (len != size) {
            fprintf(stderr, "receiver: message %llu is %zu bytes, expected %zu\n",
                    (unsigned long long)k, len, size);
            return 1;
        }
        size_t bad = check_pattern(data, len, k);
        if (bad != len) {
            fprintf(stderr,
                    "receiver: message %llu, byte %zu is 0x%02x, expected 0x%02x: the "
                    "sender's overwrite leaked through\n",
                    (unsigned long long)k, bad, data[bad], pattern_byte(k, bad));
            return 1;
        }
        CHECK(zcio_buffer_free(msg)); /* NULL for the odd ones: allowed */
    }
    double secs = now_seconds() - start;

    char verdict[64];
    int n = snprintf(verdict, sizeof verdict, "ok %llu", (unsigned long long)count);
    uint64_t ticket;
    CHECK(zcio_channel_send(ch, ZCIO_SEMANTICS_COPY, (const uint8_t *)verdict, (size_t)n, &ticket));
    CHECK(zcio_channel_wait(ch, ticket, 30000));
    if (count > 1)
        printf("receiver: %llu messages of %zu bytes checked byte for byte; %.1f MiB/s after "
               "the first\n",
               (unsigned long long)count, size,
               (double)(count - 1) * (double)size / (1 << 20) / (secs > 0 ? secs : 1e-9));
    else
        printf("receiver: 1 message of %zu bytes checked byte for byte\n", size);
    free(own);
    CHECK(zcio_channel_free(ch));
    return 0;
}
