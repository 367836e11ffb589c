/* An fbuf path between two programs started on their own: the originator offers the path
 * under a name, writes each message once into an fbuf and sends it; the receiver joins by the
 * name, reads each message in place (read-only, no copy), checks it and frees it, and the fbuf
 * goes back to the originator to be reused (the path holds 1 MiB: more messages than fit).
 *
 *     fbuf_path originator NAME COUNT
 *     fbuf_path receiver NAME COUNT */
#include "common.h"

/* The length of message k: 1 to about 60 KiB, a different one each time. */
static size_t message_len(uint64_t k) { return 1 + (size_t)((k * 7919u) % 60000u); }

static int originator(const char *name, uint64_t count) {
    zcio_fbuf_path *path;
    size_t receivers = 0;
    CHECK(zcio_fbuf_path_create(name, 256 * 1024, 4, 0, &path));
    CHECK(zcio_fbuf_path_accept(path, 30000, &receivers));
    for (uint64_t k = 0; k < count; k++) {
        zcio_fbuf *f;
        uint8_t *data;
        size_t len = message_len(k);
        CHECK(zcio_fbuf_alloc(path, len, &f)); /* waits for fbufs to come back when full */
        CHECK(zcio_fbuf_data(f, &data));
        fill_pattern(data, len, k);
        CHECK(zcio_fbuf_send(&f));
        if (f != NULL) {
            fprintf(stderr, "originator: zcio_fbuf_send left the fbuf's handle\n");
            return 1;
        }
    }
    CHECK(zcio_fbuf_path_wait_all(path, 30000)); /* every fbuf back from the receiver */
    CHECK(zcio_fbuf_path_free(path));            /* the receiver then gets ZCIO_CLOSED */
    printf("originator: %llu messages sent through %zu receiver(s), every fbuf back\n",
           (unsigned long long)count, receivers);
    return 0;
}

static int receiver(const char *name, uint64_t count) {
    zcio_fbuf_receiver *rx;
    CHECK(zcio_fbuf_join(name, 30000, &rx));
    uint64_t k = 0;
    for (;;) {
        zcio_fbuf_view *v;
        zcio_status s = zcio_fbuf_recv(rx, 30000, &v);
        if (s == ZCIO_CLOSED) break;
        CHECK(s);
        const uint8_t *data;
        size_t len;
        CHECK(zcio_fbuf_view_data(v, &data));
        CHECK(zcio_fbuf_view_len(v, &len));
        if (len != message_len(k)) {
            fprintf(stderr, "receiver: message %llu is %zu bytes, expected %zu\n",
                    (unsigned long long)k, len, message_len(k));
            return 1;
        }
        size_t bad = check_pattern(data, len, k);
        if (bad != len) {
            fprintf(stderr, "receiver: message %llu, byte %zu is 0x%02x, expected 0x%02x\n",
                    (unsigned long long)k, bad, data[bad], pattern_byte(k, bad));
            return 1;
        }
        CHECK(zcio_fbuf_view_free(v)); /* back to the originator */
        k++;
    }
    CHECK(zcio_fbuf_receiver_free(rx));
    if (k != count) {
        fprintf(stderr, "receiver: the path closed after %llu messages, expected %llu\n",
                (unsigned long long)k, (unsigned long long)count);
        return 1;
    }
    printf("receiver: %llu messages read in place and checked byte for byte\n",
           (unsigned long long)k);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s originator|receiver NAME COUNT\n", argv[0]);
        return 2;
    }
    uint64_t count = strtoull(argv[3], NULL, 10);
    if (strcmp(argv[1], "originator") == 0) return originator(argv[2], count);
    if (strcmp(argv[1], "receiver") == 0) return receiver(argv[2], count);
    fprintf(stderr, "%s: the role is originator or receiver, not %s\n", argv[0], argv[1]);
    return 2;
}
