/* Every bad argument answered with its status, never a crash: NULL handles, NULL buffers and
 * out-parameters, zero lengths, a buffer too small, an unknown semantics, a name too long,
 * nobody listening, handles freed (then NULLed, or passed again), a handle of another type,
 * and a peer gone. Run by `cargo test -p zcio-c` (under AddressSanitizer where the compiler
 * has it).
 *
 *     bad_args NAME          (a channel name of its own: it talks to itself over it) */
#include <pthread.h>
#include "common.h"

static int failures = 0;

/* Expect `call` to return `want`; say which call got what. */
#define EXPECT(want, call)                                                                \
    do {                                                                                  \
        zcio_status got_ = (call);                                                        \
        if (got_ != (want)) {                                                             \
            char m_[512];                                                                 \
            zcio_last_error(m_, sizeof m_, NULL);                                         \
            fprintf(stderr, "%s:%d: %s\n  returned %s\n  expected %s\n  last error: %s\n", \
                    __FILE__, __LINE__, #call, zcio_status_string(got_),                 \
                    zcio_status_string(want), m_);                                        \
            failures++;                                                                   \
        }                                                                                 \
    } while (0)

/* Expect the last error to contain `part`. */
static void expect_message(const char *part, int line) {
    char m[512];
    size_t n = 0;
    if (zcio_last_error(m, sizeof m, &n) != ZCIO_OK || strstr(m, part) == NULL ||
        n != strlen(m)) {
        fprintf(stderr, "bad_args.c:%d: last error \"%s\" (%zu bytes) lacks \"%s\"\n", line, m,
                n, part);
        failures++;
    }
}
#define EXPECT_MESSAGE(part) expect_message(part, __LINE__)

struct connector {
    const char *name;
    zcio_channel *ch;
    zcio_status status;
};

static void *connect_thread(void *arg) {
    struct connector *c = arg;
    c->status = zcio_channel_connect(c->name, 10000, &c->ch);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s NAME\n", argv[0]);
        return 2;
    }
    const char *name = argv[1];
    uint8_t small[16] = {0};
    size_t n = 99;
    uint64_t ticket = 77;
    int fd = -7;

    /* Status strings: each names its status; an unknown value is said to be one. */
    if (strncmp(zcio_status_string(ZCIO_TOO_SMALL), "ZCIO_TOO_SMALL", 14) != 0 ||
        strcmp(zcio_status_string(-1), "unknown zcio_status") != 0 ||
        strcmp(zcio_status_string(1000), "unknown zcio_status") != 0) {
        fprintf(stderr, "zcio_status_string names the statuses wrong\n");
        failures++;
    }
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_last_error(NULL, 10, NULL));
    char tiny[1];
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_last_error(tiny, 0, NULL));

    /* NULL handles, each call. */
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_channel_send(NULL, ZCIO_SEMANTICS_COPY, small, 16, &ticket));
    EXPECT_MESSAGE("zcio_channel_send: argument `channel` is NULL");
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_channel_recv(NULL, small, 16, 0, &n));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_channel_recv_alloc(NULL, 0, NULL));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_channel_peek_len(NULL, 0, &n));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_channel_wait(NULL, 1, 0));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_channel_flush(NULL, 0));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_channel_fd(NULL, &fd));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_listener_accept(NULL, 0, NULL));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_listener_fd(NULL, &fd));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_buffer_data(NULL, NULL));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_buffer_len(NULL, &n));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_fbuf_alloc(NULL, 10, NULL));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_fbuf_recv(NULL, 0, NULL));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_fbuf_view_data(NULL, NULL));
    /* The _free functions take NULL. */
    EXPECT(ZCIO_OK, zcio_channel_free(NULL));
    EXPECT(ZCIO_OK, zcio_listener_free(NULL));
    EXPECT(ZCIO_OK, zcio_buffer_free(NULL));
    EXPECT(ZCIO_OK, zcio_fbuf_free(NULL));
    EXPECT(ZCIO_OK, zcio_fbuf_path_free(NULL));
    EXPECT(ZCIO_OK, zcio_fbuf_view_free(NULL));
    EXPECT(ZCIO_OK, zcio_fbuf_receiver_free(NULL));
    if (n != 99 || ticket != 77 || fd != -7) {
        fprintf(stderr, "a failed call wrote an out-parameter\n");
        failures++;
    }

    /* Names: NULL, too long, not UTF-8, nobody listening. */
    zcio_listener *l = NULL;
    zcio_channel *ch = NULL;
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_channel_listen(NULL, &l));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_channel_listen(name, NULL));
    char long_name[300];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = 0;
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_channel_listen(long_name, &l));
    EXPECT_MESSAGE("a name is 1 to 100 bytes");
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_channel_connect(long_name, 10, &ch));
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_channel_listen("\xff\xfe", &l));
    EXPECT_MESSAGE("not UTF-8");
    char nobody[200];
    snprintf(nobody, sizeof nobody, "%s-nobody", name);
    double t0 = now_seconds();
    EXPECT(ZCIO_TIMED_OUT, zcio_channel_connect(nobody, 100, &ch));
    double waited = now_seconds() - t0;
    if (waited < 0.09 || waited > 5) {
        fprintf(stderr, "connect to nobody with 100 ms took %.3f s\n", waited);
        failures++;
    }
    if (ch != NULL || l != NULL) {
        fprintf(stderr, "a failed listen or connect wrote its out-parameter\n");
        failures++;
    }

    /* A channel to itself: one thread connects while this one accepts. */
    EXPECT(ZCIO_OK, zcio_channel_listen(name, &l));
    zcio_listener *l2 = NULL;
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_channel_listen(name, &l2)); /* taken */
    EXPECT_MESSAGE("taken");
    EXPECT(ZCIO_TIMED_OUT, zcio_listener_accept(l, 50, &ch)); /* nobody yet */
    struct connector c = {name, NULL, ZCIO_OTHER};
    pthread_t t;
    pthread_create(&t, NULL, connect_thread, &c);
    zcio_channel *rx = NULL;
    EXPECT(ZCIO_OK, zcio_listener_accept(l, 10000, &rx));
    pthread_join(t, NULL);
    EXPECT(ZCIO_OK, c.status);
    zcio_channel *tx = c.ch;
    if (!rx || !tx) {
        fprintf(stderr, "no channel to go on with: %d failures so far\n", failures + 1);
        return 1;
    }
    EXPECT(ZCIO_OK, zcio_channel_fd(rx, &fd));
    if (fd < 0) {
        fprintf(stderr, "zcio_channel_fd gave %d\n", fd);
        failures++;
    }

    /* Sends refused before anything is sent. */
    uint8_t msg[100];
    fill_pattern(msg, sizeof msg, 5);
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_channel_send(tx, ZCIO_SEMANTICS_COPY, NULL, 100, &ticket));
    EXPECT_MESSAGE("argument `buf` is NULL");
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_channel_send(tx, ZCIO_SEMANTICS_COPY, msg, 0, &ticket));
    EXPECT_MESSAGE("0 bytes");
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_channel_send(tx, 99, msg, 100, &ticket));
    EXPECT_MESSAGE("99 is no zcio_semantics");
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_channel_send(tx, -1, msg, 100, &ticket));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_channel_send(tx, ZCIO_SEMANTICS_COPY, msg, 100, NULL));
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_channel_send(tx, ZCIO_SEMANTICS_COPY, msg, SIZE_MAX, &ticket));
    /* Nothing was sent: a receive finds nothing. */
    EXPECT(ZCIO_TIMED_OUT, zcio_channel_peek_len(rx, 50, &n));
    EXPECT(ZCIO_TIMED_OUT, zcio_channel_recv(rx, small, sizeof small, 50, &n));

    /* One message, received into a buffer too small, then into one that fits. */
    EXPECT(ZCIO_OK, zcio_channel_send(tx, ZCIO_SEMANTICS_COPY, msg, 100, &ticket));
    n = 99;
    EXPECT(ZCIO_TOO_SMALL, zcio_channel_recv(rx, small, sizeof small, 1000, &n));
    EXPECT_MESSAGE("the next message is 100 bytes, and the buffer only 16");
    if (n != 99) {
        fprintf(stderr, "ZCIO_TOO_SMALL wrote `received`\n");
        failures++;
    }
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_channel_recv(rx, NULL, 100, 1000, &n));
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_channel_recv(rx, small, 0, 1000, &n));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_channel_recv(rx, small, sizeof small, 1000, NULL));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_channel_peek_len(rx, 1000, NULL));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_channel_recv_alloc(rx, 1000, NULL));
    EXPECT(ZCIO_OK, zcio_channel_peek_len(rx, 1000, &n));
    if (n != 100) {
        fprintf(stderr, "peek_len says %zu, expected 100\n", n);
        failures++;
    }
    uint8_t got[200];
    EXPECT(ZCIO_OK, zcio_channel_recv(rx, got, sizeof got, 1000, &n));
    if (n != 100 || check_pattern(got, 100, 5) != 100) {
        fprintf(stderr, "the message came as %zu bytes, not the 100 sent\n", n);
        failures++;
    }
    EXPECT(ZCIO_OK, zcio_channel_wait(tx, ticket, 1000));
    EXPECT(ZCIO_OK, zcio_channel_flush(tx, 1000));

    /* Buffers: zero length, NULL out-parameters, a handle of another type, freed handles. */
    zcio_buffer *b = NULL;
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_alloc(0, &b));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_alloc(4096, NULL));
    EXPECT(ZCIO_OK, zcio_alloc(4096, &b));
    uint8_t *w = NULL;
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_buffer_data_mut(b, NULL));
    EXPECT(ZCIO_OK, zcio_buffer_data_mut(b, &w));
    EXPECT(ZCIO_OK, zcio_buffer_len(b, &n));
    if (!w || n != 4096 || w[0] != 0 || w[4095] != 0) {
        fprintf(stderr, "zcio_alloc(4096) gave %zu bytes at %p, not zeroed\n", n, (void *)w);
        failures++;
    }
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_channel_flush((zcio_channel *)b, 0));
    EXPECT_MESSAGE("a zcio_buffer, where a zcio_channel was expected");
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_channel_free((zcio_channel *)b));
    EXPECT(ZCIO_OK, zcio_buffer_free(b));
    /* Freed, not NULLed: the handle is known to be gone (nothing was allocated since). */
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_buffer_len(b, &n));
    EXPECT_MESSAGE("not a live zcio_buffer");
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_buffer_free(b));
    b = NULL; /* freed, then NULLed */
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_buffer_len(b, &n));
    EXPECT(ZCIO_OK, zcio_buffer_free(b));

    /* Checksum: NULL data or out-parameter; 0 bytes allowed; a known sum. */
    uint16_t sum = 1;
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_checksum(NULL, 4, &sum));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_checksum(msg, 4, NULL));
    EXPECT(ZCIO_OK, zcio_checksum(msg, 0, &sum));
    if (sum != 0xffff) {
        fprintf(stderr, "the checksum of nothing is 0x%04x, not 0xffff\n", sum);
        failures++;
    }
    /* RFC 1071's example: 00 01 f2 03 f4 f5 f6 f7 sums to 0xddf2, so the checksum is
     * 0x220d (to be stored in a header in network byte order, htons). */
    const uint8_t rfc[8] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
    EXPECT(ZCIO_OK, zcio_checksum(rfc, sizeof rfc, &sum));
    if (sum != 0x220d) {
        fprintf(stderr, "RFC 1071's example: checksum 0x%04x, expected 0x220d\n", sum);
        failures++;
    }

    /* Fbuf paths: bad geometry and flags, nobody offering a name, sends with no receiver. */
    zcio_fbuf_path *p = NULL;
    char fname[200];
    snprintf(fname, sizeof fname, "%s-path", name);
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_fbuf_path_create(fname, 0, 4, 0, &p));
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_fbuf_path_create(fname, 65536, 0, 0, &p));
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_fbuf_path_create(fname, 65536, 4, 0x80, &p));
    EXPECT_MESSAGE("flags");
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_fbuf_path_create(long_name, 65536, 4, 0, &p));
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_fbuf_path_create(fname, 65536, 4, 0, NULL));
    zcio_fbuf_receiver *r = NULL;
    EXPECT(ZCIO_TIMED_OUT, zcio_fbuf_join(nobody, 100, &r));
    zcio_status made = zcio_fbuf_path_create(fname, 65536, 4, 0, &p);
    if (made == ZCIO_VM && getenv("ZCIO_C_SANITIZED")) {
        /* AddressSanitizer's shadow memory covers the region fbuf paths are mapped in. */
        char m[512];
        zcio_last_error(m, sizeof m, NULL);
        printf("bad_args: the fbuf checks past path creation are left to the run without "
               "AddressSanitizer: %s\n", m);
        goto peer_gone;
    }
    EXPECT(ZCIO_OK, made);
    EXPECT(ZCIO_TIMED_OUT, zcio_fbuf_path_accept(p, 50, NULL));
    zcio_fbuf *f = NULL;
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_fbuf_alloc(p, 0, &f));
    EXPECT(ZCIO_OK, zcio_fbuf_alloc(p, 5000, &f));
    EXPECT(ZCIO_OK, zcio_fbuf_len(f, &n));
    if (n != 5000) {
        fprintf(stderr, "an fbuf of 5000 bytes says %zu\n", n);
        failures++;
    }
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_fbuf_send(NULL));
    zcio_fbuf *none = NULL;
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_fbuf_send(&none));
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_fbuf_send(&f));
    EXPECT_MESSAGE("no receiver yet");
    if (f == NULL) {
        fprintf(stderr, "a refused fbuf send took the fbuf\n");
        failures++;
    }
    EXPECT(ZCIO_OK, zcio_fbuf_free(f));
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_fbuf_free(f)); /* twice */
    EXPECT(ZCIO_OK, zcio_fbuf_path_wait_all(p, 10));  /* nothing out */
    EXPECT(ZCIO_OK, zcio_fbuf_path_free(p));

peer_gone:
    /* The peer goes: the other end hears of it. */
    EXPECT(ZCIO_OK, zcio_channel_free(tx));
    EXPECT(ZCIO_PEER_GONE, zcio_channel_recv(rx, got, sizeof got, 5000, &n));
    EXPECT(ZCIO_OK, zcio_channel_free(rx));
    EXPECT(ZCIO_INVALID_ARGUMENT, zcio_channel_free(rx)); /* twice */
    rx = NULL;
    EXPECT(ZCIO_NULL_ARGUMENT, zcio_channel_recv(rx, got, sizeof got, 0, &n));
    EXPECT(ZCIO_OK, zcio_listener_free(l));

    if (failures) {
        fprintf(stderr, "bad_args: %d checks failed\n", failures);
        return 1;
    }
    printf("bad_args: every bad argument answered with its status\n");
    return 0;
}
