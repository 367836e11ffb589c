/* The sending program: connects to the receiver by its channel name and sends COUNT
 * messages of SIZE bytes under emulated copy from a buffer zcio made (2 MiB pages from
 * 2 MiB), overwriting the buffer right after each send: with the next message's bytes, and
 * after the last with 0xEE. The receiver still gets each message as it was at its send.
 *
 *     sender NAME [SIZE [COUNT]]         (SIZE as 4096, 64k, 1m; default 1m and 16)
 */
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
        fprintf(stderr, "sender: SIZE and COUNT must be at least 1\n");
        return 2;
    }

    zcio_channel *ch;
    CHECK(zcio_channel_connect(name, 30000, &ch)); /* waits for the receiver to listen */

    zcio_buffer *buf;
    uint8_t *data;
    CHECK(zcio_alloc(size, &buf));
    CHECK(zcio_buffer_data_mut(buf, &data));
    fill_pattern(data, size, 0);
    double start = now_seconds();
    for (uint64_t k = 0; k < count; k++) {
        uint64_t ticket;
        CHECK(zcio_channel_send(ch, ZCIO_SEMANTICS_EMULATED_COPY, data, size, &ticket));
        /* Right after the send, whether or not the receiver has read: the message keeps the
         * bytes of the moment of the call. */
        if (k + 1 < count)
            fill_pattern(data, size, k + 1);
        else
            memset(data, 0xEE, size);
    }
    CHECK(zcio_channel_flush(ch, 60000)); /* every message is the receiver's */
    double secs = now_seconds() - start;

    char verdict[64];
    size_t n;
    CHECK(zcio_channel_recv(ch, (uint8_t *)verdict, sizeof verdict - 1, 60000, &n));
    verdict[n] = 0;
    char want[64];
    snprintf(want, sizeof want, "ok %llu", (unsigned long long)count);
    if (strcmp(verdict, want) != 0) {
        fprintf(stderr, "sender: the receiver said \"%s\", expected \"%s\"\n", verdict, want);
        return 1;
    }
    for (size_t i = 0; i < size; i++)
        if (data[i] != 0xEE) {
            fprintf(stderr, "sender: its own overwrite did not stick at byte %zu\n", i);
            return 1;
        }
    printf("sender: %llu messages of %zu bytes sent under emulated copy in %.3f s "
           "(%.1f MiB/s), each overwritten at once; the receiver got them as sent\n",
           (unsigned long long)count, size, secs,
           (double)count * (double)size / (1 << 20) / (secs > 0 ? secs : 1e-9));
    CHECK(zcio_buffer_free(buf));
    CHECK(zcio_channel_free(ch));
    return 0;
}
